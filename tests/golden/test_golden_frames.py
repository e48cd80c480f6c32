"""Hand-derived request/response frames, byte for byte.

Each frame below is written out from Kafka's wire format (the derivation is in
the comments, one line per field), not produced by our encoder. The tests
check that protocol.framing encodes exactly these bytes and decodes them back.

Wire format reminders:
* a frame is ``int32 size`` + payload (size excludes itself);
* request header v1: int16 api_key, int16 api_version, int32 correlation_id,
  nullable STRING client_id (int16 length); header v2 adds a tagged-field
  section but keeps client_id a classic (non-compact) string;
* response header v0: int32 correlation_id; v1 adds tagged fields. ApiVersions
  responses always use v0, even in flexible versions;
* flexible versions use COMPACT strings/arrays (uvarint length + 1, 0 = null)
  and end every struct with a tagged-field section (uvarint count, 0 = none);
  a tagged field is written only when its value differs from its default.
"""

from __future__ import annotations

import pytest
from crc32c import crc32c

from protocol.framing import FrameSplitter, decode_request, decode_response, encode_request, encode_response
from protocol.records import build_batch, decode_records
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API_VERSIONS = APIS_BY_NAME["ApiVersions"]
METADATA = APIS_BY_NAME["Metadata"]
PRODUCE = APIS_BY_NAME["Produce"]


def hexbytes(text: str) -> bytes:
    """bytes.fromhex that ignores comments after '#' and any whitespace."""
    cleaned = " ".join(line.split("#", 1)[0] for line in text.splitlines())
    return bytes.fromhex(cleaned)


# --------------------------------------------------------------------------- ApiVersions v0 request

API_VERSIONS_V0_REQUEST = hexbytes(
    """
    00 00 00 0e        # size = 14 bytes follow
    00 12              # request_api_key = 18 (ApiVersions)
    00 00              # request_api_version = 0
    00 00 00 01        # correlation_id = 1
    00 04 74 65 73 74  # client_id: int16 length 4, "test"
                       # body v0: no fields
    """
)


def test_api_versions_v0_request():
    body = API_VERSIONS.request.cls()
    assert encode_request(API_VERSIONS, 0, 1, "test", body) == API_VERSIONS_V0_REQUEST
    header, decoded = decode_request(API_VERSIONS_V0_REQUEST[4:])
    assert (header.request_api_key, header.request_api_version, header.correlation_id, header.client_id) == (18, 0, 1, "test")
    assert decoded == body


def test_request_with_null_client_id():
    frame = hexbytes(
        """
        00 00 00 0a   # size = 10
        00 12 00 00   # ApiVersions v0
        00 00 00 02   # correlation_id = 2
        ff ff         # client_id = null (int16 length -1)
        """
    )
    assert encode_request(API_VERSIONS, 0, 2, None, API_VERSIONS.request.cls()) == frame
    header, _ = decode_request(frame[4:])
    assert header.client_id is None


# --------------------------------------------------------------------------- ApiVersions v3 request

API_VERSIONS_V3_REQUEST = hexbytes(
    """
    00 00 00 18        # size = 24 = 15 header + 9 body
    00 12              # request_api_key = 18
    00 03              # request_api_version = 3 (flexible: header v2)
    00 00 00 07        # correlation_id = 7
    00 04 74 65 73 74  # client_id: NON-compact string, int16 length 4, "test"
    00                 # header tagged fields: none
    04 70 79 62        # client_software_name: compact string, uvarint 3+1, "pyb"
    04 31 2e 30        # client_software_version: compact string, uvarint 3+1, "1.0"
    00                 # body tagged fields: none
    """
)


def test_api_versions_v3_request():
    body = API_VERSIONS.request.cls(client_software_name="pyb", client_software_version="1.0")
    assert encode_request(API_VERSIONS, 3, 7, "test", body) == API_VERSIONS_V3_REQUEST
    header, decoded = decode_request(API_VERSIONS_V3_REQUEST[4:])
    assert (header.request_api_key, header.request_api_version, header.correlation_id, header.client_id) == (18, 3, 7, "test")
    assert decoded.client_software_name == "pyb"
    assert decoded.client_software_version == "1.0"


def test_api_versions_v3_request_with_null_client_id():
    frame = hexbytes(
        """
        00 00 00 0e   # size = 14
        00 12 00 03   # ApiVersions v3
        00 00 00 08   # correlation_id = 8
        ff ff         # client_id = null: still int16 -1, never compact
        00            # header tagged fields
        01            # client_software_name: compact "" (uvarint 0+1)
        01            # client_software_version: compact ""
        00            # body tagged fields
        """
    )
    body = API_VERSIONS.request.cls(client_software_name="", client_software_version="")
    assert encode_request(API_VERSIONS, 3, 8, None, body) == frame
    header, decoded = decode_request(frame[4:])
    assert header.client_id is None and decoded.client_software_name == ""


# --------------------------------------------------------------------------- ApiVersions v3 response

API_VERSIONS_V3_RESPONSE = hexbytes(
    """
    00 00 00 1a        # size = 26
    00 00 00 07        # response header v0: correlation_id = 7, NO tagged fields
    00 00              # error_code = 0
    03                 # api_keys: compact array, uvarint 2+1
    00 00 00 00 00 0b  #   api_key 0 (Produce), min 0, max 11
    00                 #   entry tagged fields
    00 12 00 00 00 04  #   api_key 18 (ApiVersions), min 0, max 4
    00                 #   entry tagged fields
    00 00 00 00        # throttle_time_ms = 0
    00                 # tagged fields: all at their defaults, so none written
    """
)


def _api_versions_response(**extra):
    R = struct_classes(API_VERSIONS.response)
    return R.ApiVersionsResponse(
        error_code=0,
        api_keys=[R.ApiVersion(api_key=0, min_version=0, max_version=11), R.ApiVersion(api_key=18, min_version=0, max_version=4)],
        throttle_time_ms=0,
        **extra,
    )


def test_api_versions_v3_response():
    body = _api_versions_response()
    frame = encode_response(API_VERSIONS, 3, 7, body)
    assert bytes(frame) == API_VERSIONS_V3_RESPONSE
    correlation_id, decoded = decode_response(API_VERSIONS, 3, API_VERSIONS_V3_RESPONSE[4:])
    assert correlation_id == 7
    assert decoded == body
    assert [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys] == [(0, 0, 11), (18, 0, 4)]
    assert decoded.finalized_features_epoch == -1


def test_api_versions_v3_response_with_tagged_fields():
    R = struct_classes(API_VERSIONS.response)
    body = _api_versions_response(
        supported_features=[R.SupportedFeatureKey(name="mv", min_version=1, max_version=20)],
        finalized_features_epoch=5,
    )
    expected = hexbytes(
        """
        00 00 00 2f        # size = 47 = 26 + 21 bytes of tagged fields
        00 00 00 07        # correlation_id = 7 (header v0)
        00 00              # error_code
        03                 # api_keys: 2 entries
        00 00 00 00 00 0b 00
        00 12 00 00 00 04 00
        00 00 00 00        # throttle_time_ms
        02                 # tagged fields: 2, in tag order
        00 09              #   tag 0 (supported_features), 9 bytes:
        02                 #     compact array, 1 entry
        03 6d 76           #     name: compact "mv"
        00 01 00 14        #     min_version 1, max_version 20
        00                 #     entry tagged fields
        01 08              #   tag 1 (finalized_features_epoch), 8 bytes:
        00 00 00 00 00 00 00 05
        """
    )
    assert bytes(encode_response(API_VERSIONS, 3, 7, body)) == expected
    _, decoded = decode_response(API_VERSIONS, 3, expected[4:])
    assert decoded == body


def test_api_versions_v0_response():
    expected = hexbytes(
        """
        00 00 00 16        # size = 22
        00 00 00 07        # correlation_id
        00 00              # error_code
        00 00 00 02        # api_keys: classic array, int32 count 2
        00 00 00 00 00 0b  # Produce 0-11 (no tagged fields before v3)
        00 12 00 00 00 04  # ApiVersions 0-4
                           # v0 has no throttle_time_ms
        """
    )
    assert bytes(encode_response(API_VERSIONS, 0, 7, _api_versions_response())) == expected


# --------------------------------------------------------------------------- Metadata v1 request

METADATA_V1_NULL_TOPICS = hexbytes(
    """
    00 00 00 0f        # size = 15
    00 03              # request_api_key = 3 (Metadata)
    00 01              # request_api_version = 1
    00 00 00 02        # correlation_id = 2
    00 01 63           # client_id: "c"
    ff ff ff ff        # topics: null array (int32 -1) = all topics
                       # allow_auto_topic_creation only from v4
    """
)


def test_metadata_v1_request_null_topics():
    body = METADATA.request.cls(topics=None)
    assert encode_request(METADATA, 1, 2, "c", body) == METADATA_V1_NULL_TOPICS
    header, decoded = decode_request(METADATA_V1_NULL_TOPICS[4:])
    assert (header.request_api_key, header.request_api_version, header.correlation_id) == (3, 1, 2)
    assert decoded.topics is None


def test_metadata_v1_request_empty_and_named_topics():
    R = struct_classes(METADATA.request)
    empty = hexbytes(
        """
        00 00 00 0f  00 03 00 01  00 00 00 02  00 01 63
        00 00 00 00        # topics: empty array = no topics (not the same as null)
        """
    )
    assert encode_request(METADATA, 1, 2, "c", METADATA.request.cls(topics=[])) == empty
    assert decode_request(empty[4:])[1].topics == []
    named = hexbytes(
        """
        00 00 00 14        # size = 20
        00 03 00 01  00 00 00 02  00 01 63
        00 00 00 01        # topics: 1 entry
        00 03 61 62 63     # name: "abc"
        """
    )
    body = METADATA.request.cls(topics=[R.MetadataRequestTopic(name="abc")])
    assert encode_request(METADATA, 1, 2, "c", body) == named
    assert [t.name for t in decode_request(named[4:])[1].topics] == ["abc"]


# --------------------------------------------------------------------------- Produce v3 request

TINY_BATCH = hexbytes(
    """
    00 00 00 00 00 00 00 00  # baseOffset = 0
    00 00 00 39              # batchLength = 57 = 49 header bytes after this field + 8 record bytes
    ff ff ff ff              # partitionLeaderEpoch = -1 (a producer does not know it)
    02                       # magic = 2
    CC CC CC CC              # crc: CRC32C of everything from attributes on (filled in below)
    00 00                    # attributes: no compression, CreateTime
    00 00 00 00              # lastOffsetDelta = 0
    00 00 01 8b cf e5 68 00  # baseTimestamp = 1700000000000
    00 00 01 8b cf e5 68 00  # maxTimestamp = 1700000000000
    ff ff ff ff ff ff ff ff  # producerId = -1
    ff ff                    # producerEpoch = -1
    ff ff ff ff              # baseSequence = -1
    00 00 00 01              # recordsCount = 1
    0e                       # record length: varint 7 (zigzag 14)
    00                       #   attributes
    00                       #   timestampDelta 0
    00                       #   offsetDelta 0
    01                       #   key length -1 (null)
    02 76                    #   value length 1, "v"
    00                       #   headers count 0
    """
)
TINY_BATCH = TINY_BATCH[:17] + crc32c(TINY_BATCH[21:]).to_bytes(4, "big") + TINY_BATCH[21:]

PRODUCE_V3_REQUEST = hexbytes(
    """
    00 00 00 6b        # size = 107 = 11 header + 96 body
    00 00              # request_api_key = 0 (Produce)
    00 03              # request_api_version = 3
    00 00 00 09        # correlation_id = 9
    00 01 70           # client_id: "p"
    ff ff              # transactional_id: null (nullable string from v3)
    00 01              # acks = 1
    00 00 03 e8        # timeout_ms = 1000
    00 00 00 01        # topic_data: 1 topic
    00 01 74           #   name: "t"
    00 00 00 01        #   partition_data: 1 partition
    00 00 00 00        #     index = 0
    00 00 00 45        #     records: int32 length 69, then the batch
    """
) + TINY_BATCH


def test_tiny_batch_is_what_build_batch_and_kafka_python_make():
    assert len(TINY_BATCH) == 69
    assert build_batch([(None, b"v", [], 1_700_000_000_000)]) == TINY_BATCH
    (record,) = decode_records(TINY_BATCH)
    assert (record.offset, record.key, record.value, record.timestamp_ms) == (0, None, b"v", 1_700_000_000_000)
    from kafka.record.default_records import DefaultRecordBatch

    kp = DefaultRecordBatch(TINY_BATCH)
    assert kp.validate_crc()
    assert [(r.offset, r.key, r.value, r.timestamp) for r in kp] == [(0, None, b"v", 1_700_000_000_000)]


def test_produce_v3_request():
    R = struct_classes(PRODUCE.request)
    body = R.ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=1000,
        topic_data=[R.TopicProduceData(name="t", partition_data=[R.PartitionProduceData(index=0, records=TINY_BATCH)])],
    )
    assert encode_request(PRODUCE, 3, 9, "p", body) == PRODUCE_V3_REQUEST
    header, decoded = decode_request(PRODUCE_V3_REQUEST[4:])
    assert (header.request_api_key, header.request_api_version, header.correlation_id, header.client_id) == (0, 3, 9, "p")
    assert decoded.transactional_id is None
    assert (decoded.acks, decoded.timeout_ms) == (1, 1000)
    (topic,) = decoded.topic_data
    assert topic.name == "t"
    (partition,) = topic.partition_data
    assert partition.index == 0
    assert bytes(partition.records) == TINY_BATCH


# --------------------------------------------------------------------------- all of them through a FrameSplitter

ALL_FRAMES = [API_VERSIONS_V0_REQUEST, API_VERSIONS_V3_REQUEST, METADATA_V1_NULL_TOPICS, PRODUCE_V3_REQUEST]


@pytest.mark.parametrize("chunk", [1, 3, 7, 1000])
def test_golden_frames_through_a_splitter(chunk):
    stream = b"".join(ALL_FRAMES)
    splitter = FrameSplitter(1 << 20)
    frames = []
    for i in range(0, len(stream), chunk):
        frames += splitter.feed(stream[i : i + chunk])
    assert frames == [f[4:] for f in ALL_FRAMES]
    assert splitter.buffered_bytes == 0
    assert [decode_request(f)[0].request_api_key for f in frames] == [18, 18, 3, 0]
