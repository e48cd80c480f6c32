"""Our declarations against Apache Kafka's JSON message definitions, field by field.

The reference folder is not part of the project; without it these tests skip.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from protocol.registry import APIS_BY_KEY, DATA_MESSAGES
from protocol.schema import Array, Primitive, Struct, Versions
from protocol.transaction_state import MESSAGES as TRANSACTION_STATE_MESSAGES

REFERENCE_DIR = Path(
    os.environ.get("PYBROKER_KAFKA_SCHEMAS", Path(__file__).resolve().parents[3] / "shared" / "reference" / "kafka-schemas")
)
CLIENTS_DIR = REFERENCE_DIR / "clients"

pytestmark = pytest.mark.skipif(not CLIENTS_DIR.is_dir(), reason="reference kafka-schemas folder is absent")


def load_reference(path: Path) -> dict:
    # The reference files carry // comments, which JSON does not allow.
    text = re.sub(r"^\s*//.*$", "", path.read_text(), flags=re.MULTILINE)
    return json.loads(text)


def snake_case(name: str) -> str:
    name = name.replace("KRaft", "Kraft")
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return name.lower()


# The records of __consumer_offsets that the group coordinator writes and reads.
GROUP_COORDINATOR_RECORDS = ("OffsetCommitKey", "OffsetCommitValue", "GroupMetadataKey", "GroupMetadataValue") + tuple(
    f"ConsumerGroup{record}{part}"
    for record in ("Metadata", "PartitionMetadata", "MemberMetadata", "TargetAssignmentMetadata", "TargetAssignmentMember", "CurrentMemberAssignment")
    for part in ("Key", "Value")
) + tuple(
    f"ShareGroup{record}{part}"
    for record in ("MemberMetadata", "Metadata", "TargetAssignmentMetadata", "TargetAssignmentMember", "CurrentMemberAssignment")
    for part in ("Key", "Value")
)
# The records of __transaction_state (declared in protocol/transaction_state.py).
TRANSACTION_COORDINATOR_RECORDS = ("TransactionLogKey", "TransactionLogValue")


def reference_files() -> list[Path]:
    if not CLIENTS_DIR.is_dir():
        return []
    group_dir = REFERENCE_DIR / "group-coordinator"
    txn_dir = REFERENCE_DIR / "transaction-coordinator"
    return (
        sorted(CLIENTS_DIR.glob("*.json"))
        + [group_dir / f"{name}.json" for name in GROUP_COORDINATOR_RECORDS]
        + [txn_dir / f"{name}.json" for name in TRANSACTION_COORDINATOR_RECORDS]
    )


# Tags from here up are pybroker's own (protocol/messages/broker_lifecycle.py BALANCER_LOAD_TAG).
PRIVATE_TAG_FLOOR = 10000


def parse_default(type_name: str, raw):
    if not isinstance(raw, str):  # a few files give numbers and booleans unquoted
        return raw
    if raw == "null":
        return None
    if type_name == "bool":
        return raw.lower() == "true"
    if type_name in ("int8", "int16", "uint16", "int32", "int64"):
        return int(raw, 0)
    if type_name == "float64":
        return float(raw)
    return raw


def type_matches(ref_type: str, ours, common: dict) -> str | None:
    if ref_type.startswith("[]"):
        if not isinstance(ours, Array):
            return f"expected array {ref_type}, have {ours!r}"
        return type_matches(ref_type[2:], ours.item, common)
    if isinstance(ours, Primitive):
        return None if ours.name == ref_type else f"expected {ref_type}, have {ours.name}"
    if isinstance(ours, Struct):
        return None if ours.name == ref_type else f"expected struct {ref_type}, have struct {ours.name}"
    return f"unexpected type {ours!r}"


def compare_fields(ref_fields: list[dict], struct: Struct, common: dict, path: str, problems: list[str]) -> None:
    # pybroker's own tagged fields (tags from PRIVATE_TAG_FLOOR up, e.g. the balancer's
    # load report in BrokerHeartbeat) are not Kafka's: only pybroker nodes send them.
    ours = {f.name: f for f in struct.fields if f.tag is None or f.tag < PRIVATE_TAG_FLOOR}
    ref_names = [snake_case(f["name"]) for f in ref_fields]
    extra = sorted(set(ours) - set(ref_names))
    if extra:
        problems.append(f"{path}: fields not in the reference: {extra}")
    if [n for n in ref_names if n in ours] != [f.name for f in struct.fields if f.name in ref_names]:
        problems.append(f"{path}: field order differs: reference {ref_names}, ours {[f.name for f in struct.fields]}")
    for ref in ref_fields:
        name = snake_case(ref["name"])
        where = f"{path}.{name}"
        field = ours.get(name)
        if field is None:
            problems.append(f"{where}: missing")
            continue
        problem = type_matches(ref["type"], field.type, common)
        if problem:
            problems.append(f"{where}: {problem}")
            continue
        for key, attr in (("versions", "versions"), ("nullableVersions", "nullable"), ("taggedVersions", "tagged")):
            # Kafka's generator: a tagged field without "versions" exists in its tagged versions.
            default = ref.get("taggedVersions", "none") if key == "versions" else "none"
            want = Versions.parse(ref.get(key, default))
            have = getattr(field, attr)
            if want != have:
                problems.append(f"{where}: {key} {want} != ours {have}")
        ref_tag = ref.get("tag")
        if ref_tag is not None:
            ref_tag = int(ref_tag)  # one reference file quotes its tag
        if ref_tag != field.tag:
            problems.append(f"{where}: tag {ref.get('tag')} != ours {field.tag}")
        if bool(ref.get("ignorable", False)) != field.ignorable:
            problems.append(f"{where}: ignorable {ref.get('ignorable', False)} != ours {field.ignorable}")
        if "flexibleVersions" in ref:
            if field.flexible != Versions.parse(ref["flexibleVersions"]):
                problems.append(f"{where}: field flexibleVersions {ref['flexibleVersions']} != ours {field.flexible}")
        elif field.flexible is not None:
            problems.append(f"{where}: ours overrides flexibleVersions, the reference does not")
        base_type = ref["type"]
        implicit = field.type.default_value()
        if "default" in ref:
            want_default = parse_default(base_type, ref["default"])
            have_default = field.default_value()
            if isinstance(have_default, float) or isinstance(want_default, float):
                ok = float(have_default) == float(want_default)
            else:
                ok = have_default == want_default and type(have_default) is type(want_default)
            if not ok:
                problems.append(f"{where}: default {want_default!r} != ours {have_default!r}")
        elif field.has_explicit_default and field.default != implicit:
            problems.append(f"{where}: ours declares default {field.default!r}, the reference has none")
        # Nested structs: inline fields or a common struct.
        item_type = field.type.item if isinstance(field.type, Array) else field.type
        while isinstance(item_type, Array):
            item_type = item_type.item
        if isinstance(item_type, Struct):
            ref_struct_fields = ref.get("fields")
            if ref_struct_fields is None:
                struct_name = base_type.lstrip("[]")
                if struct_name not in common:
                    problems.append(f"{where}: reference struct {struct_name} not found")
                    continue
                ref_struct_fields = common[struct_name]["fields"]
            compare_fields(ref_struct_fields, item_type, common, where, problems)


def our_declaration(ref: dict):
    kind = ref["type"]
    if kind in ("request", "response"):
        api = APIS_BY_KEY.get(ref["apiKey"])
        if api is None:
            return None, None, None
        return api.versions, api.flexible, api.request if kind == "request" else api.response
    message = DATA_MESSAGES.get(ref["name"]) or TRANSACTION_STATE_MESSAGES.get(ref["name"])
    if message is None:
        return None, None, None
    return message.versions, message.flexible, message.struct


def apply_newer_kafka_versions(ref: dict) -> dict:
    """Where we declare a version newer than the reference holds, add exactly that
    version's change to the reference, so every older version is still compared
    field by field. Vote v2 (KIP-996) adds PreVote as the last field of the
    request's partition data; the v2 response only says the responder knows it."""
    if ref["name"] in ("VoteRequest", "VoteResponse") and ref["validVersions"] == "0-1":
        ref["validVersions"] = "0-2"
        if ref["name"] == "VoteRequest":
            topics = next(f for f in ref["fields"] if f["name"] == "Topics")
            partitions = next(f for f in topics["fields"] if f["name"] == "Partitions")
            partitions["fields"].append({"name": "PreVote", "type": "bool", "versions": "2+"})
    # AlterPartitionReassignments v1 (Kafka 4.0, KIP-860): AllowReplicationFactorChange
    # after TimeoutMs in the request, echoed after ThrottleTimeMs in the response.
    if ref["name"] in ("AlterPartitionReassignmentsRequest", "AlterPartitionReassignmentsResponse") and ref["validVersions"] == "0":
        ref["validVersions"] = "0-1"
        field = {"name": "AllowReplicationFactorChange", "type": "bool", "versions": "1+", "default": "true"}
        if ref["name"] == "AlterPartitionReassignmentsResponse":
            field["ignorable"] = True
        ref["fields"].insert(1, field)
    # Produce v12 and TxnOffsetCommit v5 (Kafka 4.0, KIP-890 part 2) change no
    # field: a transactions version 2 producer's partition joins its transaction
    # with the request itself.
    if ref["name"] in ("ProduceRequest", "ProduceResponse") and ref["validVersions"] == "0-11":
        ref["validVersions"] = "0-12"
    if ref["name"] in ("TxnOffsetCommitRequest", "TxnOffsetCommitResponse") and ref["validVersions"] == "0-4":
        ref["validVersions"] = "0-5"
    # The share group APIs' v1 (Kafka 4.1, KIP-932's first stable version): the
    # same as v0 but for ShareFetch, whose request trades PartitionMaxBytes for
    # MaxRecords and BatchSize and whose response adds AcquisitionLockTimeoutMs.
    share_apis = ("ShareGroupHeartbeat", "ShareGroupDescribe", "ShareFetch", "ShareAcknowledge")
    if ref["name"] in [f"{api}{kind}" for api in share_apis for kind in ("Request", "Response")] and ref["validVersions"] == "0":
        ref["validVersions"] = "0-1"
        ref.pop("latestVersionUnstable", None)
        if ref["name"] == "ShareFetchRequest":
            at = next(i for i, f in enumerate(ref["fields"]) if f["name"] == "MaxBytes") + 1
            ref["fields"][at:at] = [
                {"name": "MaxRecords", "type": "int32", "versions": "1+"},
                {"name": "BatchSize", "type": "int32", "versions": "1+"},
            ]
            topics = next(f for f in ref["fields"] if f["name"] == "Topics")
            partitions = next(f for f in topics["fields"] if f["name"] == "Partitions")
            next(f for f in partitions["fields"] if f["name"] == "PartitionMaxBytes")["versions"] = "0"
        if ref["name"] == "ShareFetchResponse":
            at = next(i for i, f in enumerate(ref["fields"]) if f["name"] == "ErrorMessage") + 1
            ref["fields"].insert(at, {"name": "AcquisitionLockTimeoutMs", "type": "int32", "versions": "1+"})
    # ReadShareGroupStateSummary v0 as Kafka 4.1 made it stable: LeaderEpoch after
    # StateEpoch in the partition result (the reference holds the earlier draft).
    if ref["name"] == "ReadShareGroupStateSummaryResponse":
        results = next(f for f in ref["fields"] if f["name"] == "Results")
        partitions = next(f for f in results["fields"] if f["name"] == "Partitions")
        names = [f["name"] for f in partitions["fields"]]
        if "LeaderEpoch" not in names:
            at = names.index("StateEpoch") + 1
            partitions["fields"].insert(at, {"name": "LeaderEpoch", "type": "int32", "versions": "0+"})
    return ref


@pytest.mark.parametrize("path", reference_files(), ids=lambda p: p.stem)
def test_declaration_matches_reference(path: Path):
    ref = apply_newer_kafka_versions(load_reference(path))
    versions, flexible, struct = our_declaration(ref)
    assert struct is not None, f"no declaration for {ref['name']}"
    problems: list[str] = []
    if versions != Versions.parse(ref["validVersions"]):
        problems.append(f"validVersions {ref['validVersions']} != ours {versions}")
    if flexible != Versions.parse(ref["flexibleVersions"]):
        problems.append(f"flexibleVersions {ref['flexibleVersions']} != ours {flexible}")
    if ref["type"] in ("request", "response"):
        api = APIS_BY_KEY[ref["apiKey"]]
        if ref["name"] != api.name + ref["type"].capitalize():
            problems.append(f"api name {api.name} does not match {ref['name']}")
    common = {c["name"]: c for c in ref.get("commonStructs", [])}
    compare_fields(ref["fields"], struct, common, ref["name"], problems)
    assert not problems, "\n".join(problems)


def test_every_reference_message_is_declared():
    missing = []
    for path in reference_files():
        ref = load_reference(path)
        if our_declaration(ref)[2] is None:
            missing.append(ref["name"])
    assert not missing, f"undeclared: {missing}"
