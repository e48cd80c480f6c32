"""Control records of the KRaft log and snapshots: leader changes, voter sets, snapshot bounds."""

from protocol.schema import INT16, INT32, INT64, STRING, UINT16, UUID, Array, DataMessage, F, Struct

VOTER = Struct("Voter", [
    F("voter_id", INT32),
    F("voter_directory_id", UUID, "1+"),
])

APIS: list = []

DATA = [
    DataMessage("KRaftVersionRecord", "0", flexible="0+", fields=[
        F("version", INT16),
        F("kraft_version", INT16),
    ]),
    DataMessage("LeaderChangeMessage", "0-1", flexible="0+", fields=[
        F("version", INT16),
        F("leader_id", INT32),
        F("voters", Array(VOTER)),
        F("granting_voters", Array(VOTER)),
    ]),
    DataMessage("SnapshotFooterRecord", "0", flexible="0+", fields=[
        F("version", INT16),
    ]),
    DataMessage("SnapshotHeaderRecord", "0", flexible="0+", fields=[
        F("version", INT16),
        F("last_contained_log_timestamp", INT64),
    ]),
    DataMessage("VotersRecord", "0", flexible="0+", fields=[
        F("version", INT16),
        F("voters", Array(Struct("Voter", [
            F("voter_id", INT32),
            F("voter_directory_id", UUID),
            F("endpoints", Array(Struct("Endpoint", [
                F("name", STRING),
                F("host", STRING),
                F("port", UINT16),
            ]))),
            F("kraft_version_feature", Struct("KRaftVersionFeature", [
                F("min_supported_version", INT16),
                F("max_supported_version", INT16),
            ])),
        ]))),
    ]),
]
