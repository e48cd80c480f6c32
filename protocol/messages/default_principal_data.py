"""DefaultPrincipalData: the serialized client principal a forwarding broker attaches to an enveloped request."""

from protocol.schema import BOOL, STRING, DataMessage, F

APIS = []

DATA = [
    DataMessage(
        "DefaultPrincipalData", "0", flexible="0+",
        fields=[
            F("type", STRING),
            F("name", STRING),
            F("token_authenticated", BOOL),
        ],
    ),
]
