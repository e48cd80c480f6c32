"""The one error a decoder raises on bytes it cannot parse.

A peer that sends garbage is not a bug of ours: everything in ``protocol`` that
parses input raises :class:`ProtocolError` (never ``IndexError``,
``struct.error`` or ``UnicodeDecodeError``), so the broker can answer with an
error code or close that one connection and keep serving everyone else.
"""


class ProtocolError(ValueError):
    """Input bytes do not form a valid Kafka frame, message or record batch."""


class UnsupportedVersionError(ProtocolError):
    """A request names an (api_key, api_version) pair we have no declaration for."""

    def __init__(self, api_key: int, api_version: int, message: str | None = None):
        super().__init__(message or f"unsupported api_key={api_key} api_version={api_version}")
        self.api_key = api_key
        self.api_version = api_version
