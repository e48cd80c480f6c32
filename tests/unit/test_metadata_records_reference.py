"""KRaft metadata record declarations: against Kafka's reference definitions, and round trips.

The reference comparison (field names and order, types, versions, nullable and
tagged versions, tags, defaults, nested structs) reuses the conformance suite's
field comparison and skips when the reference folder is absent. The round
trips need no reference: every declared record type, every version, random
valid values, through the record frame and back.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.metadata.records import (
    BROKER_ENDPOINT,
    FRAME_VERSION,
    PARTITION_CHANGE_RECORD,
    PRIVATE_RECORD_TYPE_MIN,
    RECORD_TYPES,
    RECORD_TYPES_BY_NAME,
    REGISTER_BROKER_RECORD,
    decode_record,
    encode_record,
    record_api_key,
)
from protocol.exceptions import ProtocolError
from protocol.primitives import read_uvarint
from protocol.schema import Versions
from tests.property.strategies import values_for

REFERENCE_DIR = Path(
    os.environ.get("PYBROKER_KAFKA_SCHEMAS", Path(__file__).resolve().parents[3] / "shared" / "reference" / "kafka-schemas")
)
METADATA_DIR = REFERENCE_DIR / "metadata"
needs_reference = pytest.mark.skipif(not METADATA_DIR.is_dir(), reason="reference kafka-schemas/metadata folder is absent")

# Reference records the image does not model (yet): delegation tokens and the
# finished ZooKeeper migration.
NOT_DECLARED = {
    "DelegationTokenRecord",
    "RemoveDelegationTokenRecord",
    "ZkMigrationStateRecord",
}

# pybroker's own record types (cluster links, mirror topics) have no reference.
RECORD_NAMES = sorted(name for name, t in RECORD_TYPES_BY_NAME.items() if t.api_key < PRIVATE_RECORD_TYPE_MIN)


@needs_reference
@pytest.mark.parametrize("name", RECORD_NAMES)
def test_declaration_matches_reference(name):
    from tests.conformance.test_reference_schemas import compare_fields, load_reference

    path = METADATA_DIR / f"{name}.json"
    assert path.is_file(), f"{name} has no reference definition"
    ref = load_reference(path)
    ours = RECORD_TYPES_BY_NAME[name]
    problems: list[str] = []
    if ref["type"] != "metadata":
        problems.append(f"reference type {ref['type']}")
    if ref["apiKey"] != ours.api_key:
        problems.append(f"apiKey {ref['apiKey']} != ours {ours.api_key}")
    valid = Versions.parse(ref["validVersions"])
    if (valid.low, valid.high) != (0, ours.max_version):
        problems.append(f"validVersions {ref['validVersions']} != ours 0-{ours.max_version}")
    # The frame always carries a flexible body; a reference record that is not
    # flexible in every version could not be declared this way.
    if Versions.parse(ref["flexibleVersions"]) != Versions.parse("0+"):
        problems.append(f"flexibleVersions {ref['flexibleVersions']}: ours are always flexible")
    common = {c["name"]: c for c in ref.get("commonStructs", [])}
    compare_fields(ref["fields"], ours.struct, common, name, problems)
    assert not problems, "\n".join(problems)


@needs_reference
def test_every_reference_record_the_image_needs_is_declared():
    from tests.conformance.test_reference_schemas import load_reference

    definitions = [load_reference(path) for path in METADATA_DIR.glob("*.json")]
    reference = {ref["name"]: ref["apiKey"] for ref in definitions}
    missing = sorted(set(reference) - set(RECORD_TYPES_BY_NAME) - NOT_DECLARED)
    assert not missing, f"reference records neither declared nor listed in NOT_DECLARED: {missing}"
    # No api key of ours collides with a reference record of another name.
    for name, api_key in reference.items():
        ours = RECORD_TYPES.get(api_key)
        assert ours is None or ours.name == name, f"api key {api_key}: ours {ours.name}, reference {name}"


# --------------------------------------------------------------------------- round trips

CASES = [(t.api_key, version) for t in sorted(RECORD_TYPES.values(), key=lambda t: t.api_key) for version in range(t.max_version + 1)]
ROUNDTRIP = settings(
    max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@pytest.mark.parametrize("api_key,version", CASES, ids=[f"{RECORD_TYPES[k].name}-v{v}" for k, v in CASES])
@ROUNDTRIP
@given(data=st.data())
def test_every_record_type_and_version_round_trips(api_key, version, data):
    record_type = RECORD_TYPES[api_key]
    value = data.draw(values_for(record_type.struct, version, True))
    encoded = encode_record(value, version)
    frame_version, pos = read_uvarint(encoded, 0)
    key, pos = read_uvarint(encoded, pos)
    encoded_version, _ = read_uvarint(encoded, pos)
    assert (frame_version, key, encoded_version) == (FRAME_VERSION, api_key, version)
    assert record_api_key(value) == api_key
    decoded_key, decoded = decode_record(encoded)
    assert decoded_key == api_key
    assert decoded == value
    assert encode_record(decoded, version) == encoded
    # Every proper prefix is refused with the one error type.
    for end in range(len(encoded)):
        with pytest.raises(ProtocolError):
            decode_record(encoded[:end])


def test_partition_change_record_golden_bytes():
    # Frame 01 05 00; partition id 1; the topic id; one tagged field: tag 0
    # (isr), 5 bytes: compact array of one (02) holding int32 2. Every other
    # tagged field is at its "no change" default and so absent.
    tid = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    value = PARTITION_CHANGE_RECORD(partition_id=1, topic_id=tid, isr=[2])
    expected = bytes.fromhex("01 05 00 00000001 00112233445566778899aabbccddeeff 01 00 05 02 00000002")
    assert encode_record(value, 0) == expected
    _, decoded = decode_record(expected)
    assert decoded.leader == -2 and decoded.replicas is None and decoded.leader_recovery_state == -1


def test_register_broker_record_golden_bytes_v0_and_v3():
    tid = uuid.UUID(int=1)
    value = REGISTER_BROKER_RECORD(
        broker_id=1,
        incarnation_id=tid,
        broker_epoch=7,
        end_points=[BROKER_ENDPOINT(name="P", host="h", port=9092, security_protocol=0)],
        rack=None,
        fenced=False,
        log_dirs=[uuid.UUID(int=2)],
    )
    endpoint = "02" + "02 50" + "02 68" + "2384" + "0000" + "00"  # one endpoint: "P", "h", 9092, 0, no tags
    common = "00000001" + "00" * 15 + "01" + "0000000000000007" + endpoint + "01" + "00" + "00"  # no features, null rack, unfenced
    # v0: no is_migrating_zk_broker, no in_controlled_shutdown, no log dirs.
    assert encode_record(value, 0) == bytes.fromhex("01 00 00" + common + "00")
    # v3: is_migrating_zk_broker (false) after the broker id, in_controlled_shutdown
    # (false) after fenced, and log dirs as tag 0: compact array of one uuid (17 bytes).
    v3 = "01 00 03" + "00000001" + "00" + common[8:] + "00" + "01 00 11 02" + "00" * 15 + "02"
    assert encode_record(value, 3) == bytes.fromhex(v3)
    assert decode_record(bytes.fromhex(v3))[1] == value
