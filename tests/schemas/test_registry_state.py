"""The ``_schemas`` record codec and the registry state replayed from it (protocol/schema_formats/records.py, state.py)."""

from __future__ import annotations

import json

import pytest

from protocol.schema_formats.records import (
    ConfigKey,
    ContextKey,
    MaxIdKey,
    ModeKey,
    NoopKey,
    RecordUnreadable,
    Reference,
    SchemaKey,
    SchemaValue,
    decode_key,
    decode_schema_value,
    encode_key,
    encode_schema_value,
)
from broker.schemas.state import RegistryError, RegistryState, normalize_subject

RECORD_V1 = json.dumps({"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]})
RECORD_V2_DEFAULT = json.dumps(
    {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int", "default": 0}]}
)
RECORD_V2_NO_DEFAULT = json.dumps(
    {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}
)


def test_keys_are_confluents_shapes():
    assert json.loads(encode_key(SchemaKey("s", 2))) == {"keytype": "SCHEMA", "subject": "s", "version": 2, "magic": 1}
    assert json.loads(encode_key(ConfigKey(None))) == {"keytype": "CONFIG", "subject": None, "magic": 0}
    assert json.loads(encode_key(ModeKey("s"))) == {"keytype": "MODE", "subject": "s", "magic": 0}
    assert json.loads(encode_key(NoopKey())) == {"keytype": "NOOP", "magic": 0}
    # One key, one byte string: compaction keeps only the last record of a key.
    assert encode_key(SchemaKey("s", 1)) == encode_key(decode_key(b'{"magic":1,"version":1,"subject":"s","keytype":"SCHEMA"}'))


def test_schema_values_leave_out_the_avro_type_and_round_trip():
    avro = SchemaValue("s", 1, 7, "AVRO", '"string"')
    body = json.loads(encode_schema_value(avro))
    assert body == {"subject": "s", "version": 1, "id": 7, "schema": '"string"', "references": [], "deleted": False}
    assert decode_schema_value(encode_schema_value(avro)) == avro
    as_json = SchemaValue("s", 2, 8, "JSON", "{}", deleted=True)
    assert json.loads(encode_schema_value(as_json))["schemaType"] == "JSON"
    assert decode_schema_value(encode_schema_value(as_json)) == as_json


@pytest.mark.parametrize("raw", [b"not json", b"[]", b'{"keytype":"SCHEMA","subject":"s"}', b'{"keytype":"OTHER"}'])
def test_unreadable_keys_are_refused(raw):
    with pytest.raises(RecordUnreadable):
        decode_key(raw)


def replay(records) -> RegistryState:
    state = RegistryState()
    for key, value in records:
        state.apply(key, value)
    return state


def register(state: RegistryState, subject: str, text: str, log: list) -> int:
    planned = state.plan_register(subject, "AVRO", text)
    for key, value in planned.records:
        state.apply(key, value)
        log.append((key, value))
    return planned.schema_id


def test_ids_are_shared_by_equal_schemas_and_grow_for_new_ones():
    state, log = RegistryState(), []
    first = register(state, "a-value", RECORD_V1, log)
    assert register(state, "a-value", RECORD_V1, log) == first  # idempotent: no new record
    assert len(log) == 1
    # The same schema (spaced differently) under another subject keeps its id, as a new version there.
    assert register(state, "b-value", json.dumps(json.loads(RECORD_V1), indent=2), log) == first
    assert register(state, "a-value", RECORD_V2_DEFAULT, log) == first + 1
    assert [v.version for v in state.live_versions("a-value")] == [1, 2]
    # Another broker replaying the same records has the same state.
    other = replay(log)
    assert other.subject_names() == ["a-value", "b-value"] and other.max_id == state.max_id


def test_backward_refuses_a_field_without_default_and_none_accepts_it():
    state, log = RegistryState(), []
    register(state, "s", RECORD_V1, log)
    with pytest.raises(RegistryError) as refused:
        state.plan_register("s", "AVRO", RECORD_V2_NO_DEFAULT)
    assert (refused.value.status, refused.value.code) == (409, 409)
    for key, value in state.plan_config("s", "NONE"):
        state.apply(key, value)
    assert register(state, "s", RECORD_V2_NO_DEFAULT, log) == 2


def test_soft_then_permanent_delete_and_ids_never_reused():
    state, log = RegistryState(), []
    register(state, "s", RECORD_V1, log)
    second = register(state, "s", RECORD_V2_DEFAULT, log)
    with pytest.raises(RegistryError) as not_soft:
        state.plan_delete_subject("s", permanent=True)
    assert not_soft.value.code == 40405
    versions, records = state.plan_delete_subject("s", permanent=False)
    assert versions == [1, 2]
    for key, value in records:
        state.apply(key, value)
    assert state.subject_names() == [] and state.subject_names(deleted=True) == ["s"]
    with pytest.raises(RegistryError) as again:
        state.plan_delete_subject("s", permanent=False)
    assert again.value.code == 40404
    # The ids stay readable until the permanent delete.
    assert state.schema_by_id(second).schema == RECORD_V2_DEFAULT
    versions, records = state.plan_delete_subject("s", permanent=True)
    *tombstones, floor = records
    assert [value for _, value in tombstones] == [None, None]
    # Then the context's highest id, which outlives the tombstoned records in compaction.
    assert decode_key(floor[0]) == MaxIdKey(".") and json.loads(floor[1]) == {"context": ".", "maxId": second}
    for key, value in records:
        state.apply(key, value)
    assert state.subject_names(deleted=True) == []
    with pytest.raises(RegistryError) as gone:
        state.schema_by_id(second)
    assert gone.value.code == 40403
    # A new schema gets a new id past every id seen, and the subject's versions start again.
    third = register(state, "s", json.dumps({"type": "enum", "name": "E", "symbols": ["A"]}), log)
    assert third == second + 1
    assert [v.version for v in state.live_versions("s")] == [1]


def test_version_reads_and_their_errors():
    state, log = RegistryState(), []
    register(state, "s", RECORD_V1, log)
    assert state.version_of("s", "latest").version == 1
    assert state.version_of("s", "1").schema == RECORD_V1
    for raw, code in (("2", 40402), ("0", 42202), ("x", 42202)):
        with pytest.raises(RegistryError) as refused:
            state.version_of("s", raw)
        assert refused.value.code == code, raw
    with pytest.raises(RegistryError) as missing:
        state.version_of("nope", "1")
    assert missing.value.code == 40401


def test_configs_and_modes():
    state = RegistryState()
    assert state.compatibility(None) == "BACKWARD" and state.compatibility("s") == "BACKWARD"
    assert state.compatibility("s", default_to_global=False) is None
    for key, value in state.plan_config(None, "FULL") + state.plan_config("s", "NONE"):
        state.apply(key, value)
    assert (state.compatibility(None), state.compatibility("s"), state.compatibility("t")) == ("FULL", "NONE", "FULL")
    for key, value in state.plan_config("s", None):
        state.apply(key, value)
    assert state.compatibility("s") == "FULL"
    with pytest.raises(RegistryError) as level:
        state.plan_config(None, "SIDEWAYS")
    assert level.value.code == 42203
    for key, value in state.plan_mode(None, "READONLY"):
        state.apply(key, value)
    with pytest.raises(RegistryError) as read_only:
        state.plan_register("s", "AVRO", RECORD_V1)
    assert read_only.value.code == 42205


def test_import_mode_keeps_the_given_ids():
    state = RegistryState()
    for key, value in state.plan_mode(None, "IMPORT"):
        state.apply(key, value)
    planned = state.plan_register("s", "AVRO", RECORD_V1, schema_id=42, version=3)
    for key, value in planned.records:
        state.apply(key, value)
    assert planned.schema_id == 42 and state.version_of("s", "3").schema_id == 42
    # Without an id, IMPORT refuses; back in READWRITE new ids continue past the imported ones.
    with pytest.raises(RegistryError):
        state.plan_register("t", "AVRO", RECORD_V2_DEFAULT)
    for key, value in state.plan_mode(None, "READWRITE"):
        state.apply(key, value)
    assert state.plan_register("t", "AVRO", RECORD_V2_DEFAULT).schema_id == 43


def compacted(log: list) -> list:
    """The log as compaction leaves it once tombstones have expired: each key's last
    record, in offset order, tombstones gone."""
    last = {}
    for offset, (key, value) in enumerate(log):
        last[key] = (offset, value)
    return [(key, value) for key, (_, value) in sorted(last.items(), key=lambda item: item[1][0]) if value is not None]


def apply_all(state: RegistryState, records, log: list) -> None:
    for key, value in records:
        state.apply(key, value)
        log.append((key, value))


def test_the_highest_id_is_not_reused_after_compaction_of_its_permanent_delete():
    state, log = RegistryState(), []
    register(state, "keep", RECORD_V1, log)
    highest = register(state, "gone", json.dumps({"type": "enum", "name": "E", "symbols": ["A"]}), log)
    apply_all(state, state.plan_delete_subject("gone", permanent=False)[1], log)
    apply_all(state, state.plan_delete_subject("gone", permanent=True)[1], log)
    replayed = replay(compacted(log))
    assert "gone" not in replayed.subjects and replayed.max_id == highest
    assert replayed.plan_register("other", "AVRO", RECORD_V2_DEFAULT).schema_id == highest + 1
    # Without the NOOP floor the replay would give the id out again (what it guards against).
    without_floor = replay([(k, v) for k, v in compacted(log) if not isinstance(decode_key(k), MaxIdKey)])
    assert without_floor.plan_register("other", "AVRO", RECORD_V2_DEFAULT).schema_id == highest


def test_the_floor_record_is_a_noop_key_to_confluents_reader():
    key = json.loads(encode_key(MaxIdKey(".staging")))
    # Confluent's registry reads keytype NOOP (magic 0) as its own NOOP key and skips the record.
    assert key == {"keytype": "NOOP", "magic": 0, "context": ".staging"}
    assert decode_key(encode_key(NoopKey())) == NoopKey()
    assert json.loads(encode_key(ContextKey(".staging"))) == {"keytype": "CONTEXT", "tenant": "default", "context": ".staging", "magic": 0}


def test_contexts_have_their_own_ids_subjects_and_records_in_confluents_shape():
    state, log = RegistryState(), []
    default_id = register(state, "orders-value", RECORD_V1, log)
    planned = state.plan_register(":.staging:orders-value", "AVRO", RECORD_V2_DEFAULT)
    # A context's first registration writes its CONTEXT record, then the SCHEMA record with the qualified subject.
    (context_key, context_value), (schema_key, schema_value) = planned.records
    assert json.loads(context_value) == {"tenant": "default", "context": ".staging"}
    assert json.loads(schema_key) == {"keytype": "SCHEMA", "subject": ":.staging:orders-value", "version": 1, "magic": 1}
    assert json.loads(schema_value)["subject"] == ":.staging:orders-value"
    apply_all(state, planned.records, log)
    # Ids count per context: the first id of .staging is 1, as the default context's first.
    assert planned.schema_id == default_id == 1
    assert state.schema_by_id(1).schema == RECORD_V1
    assert state.schema_by_id(1, ".staging").schema == RECORD_V2_DEFAULT
    # ":.:s" is the default context's "s"; a second registration in .staging writes no CONTEXT record again.
    assert normalize_subject(":.:orders-value") == "orders-value"
    assert state.plan_register("orders-value", "AVRO", RECORD_V1).records == []
    assert len(state.plan_register(":.staging:other-value", "AVRO", RECORD_V1).records) == 1
    assert state.context_names() == [".", ".staging"]
    assert state.subject_names() == [":.staging:orders-value", "orders-value"]
    assert state.subject_names(prefix=":.staging:") == [":.staging:orders-value"]
    assert state.subject_names(prefix="orders") == ["orders-value"]
    assert state.subject_names(prefix=":*:orders") == [":.staging:orders-value", "orders-value"]
    # The same name in another context, looked up by id with a bare subject: Confluent's fallback.
    assert state.context_of_id(1, "orders-value") == "."
    assert state.context_of_id(1, ":.staging:orders-value") == ".staging"
    with pytest.raises(RegistryError) as not_its_id:
        state.context_of_id(1, ":.staging:nope-value")
    assert not_its_id.value.code == 40403
    assert replay(log).schema_by_id(1, ".staging").schema == RECORD_V2_DEFAULT


def test_context_settings_fall_back_to_the_context_then_global():
    state = RegistryState()
    for key, value in state.plan_config(None, "FULL") + state.plan_config(":.staging:", "NONE"):
        state.apply(key, value)
    assert json.loads(state.plan_config(":.staging:", "NONE")[0][0]) == {"keytype": "CONFIG", "subject": ":.staging:", "magic": 0}
    assert state.compatibility(":.staging:s") == "NONE"
    assert state.compatibility("s") == "FULL"
    assert state.compatibility(":.other:s") == "BACKWARD"
    assert state.compatibility(":.staging:s", default_to_global=False) is None
    for key, value in state.plan_config(":.__GLOBAL:", "FORWARD"):
        state.apply(key, value)
    assert state.compatibility(":.other:s") == "FORWARD"
    for key, value in state.plan_mode(":.ro:", "READONLY"):
        state.apply(key, value)
    with pytest.raises(RegistryError) as read_only:
        state.plan_register(":.ro:s", "AVRO", RECORD_V1)
    assert read_only.value.code == 42205
    assert state.plan_register("s", "AVRO", RECORD_V1).schema_id == 1


def test_a_context_is_deleted_only_when_empty():
    state, log = RegistryState(), []
    register(state, ":.staging:s", RECORD_V1, log)
    with pytest.raises(RegistryError) as not_empty:
        state.plan_delete_context(".staging")
    assert (not_empty.value.status, not_empty.value.code) == (422, 42211)
    apply_all(state, state.plan_delete_subject(":.staging:s", permanent=False)[1], log)
    with pytest.raises(RegistryError):
        state.plan_delete_context(".staging")  # soft-deleted subjects count
    apply_all(state, state.plan_delete_subject(":.staging:s", permanent=True)[1], log)
    apply_all(state, state.plan_delete_context(".staging"), log)
    assert state.context_names() == ["."]
    # The context's ids go on past those it gave out before.
    assert state.plan_register(":.staging:s", "AVRO", RECORD_V2_DEFAULT).schema_id == 2
    assert replay(compacted(log)).plan_register(":.staging:s", "AVRO", RECORD_V2_DEFAULT).schema_id == 2


def test_unqualified_references_resolve_in_the_referring_subjects_context():
    state, log = RegistryState(), []
    register(state, ":.shared:name-value", '"string"', log)
    register(state, ":.shared:wrapper-value", RECORD_V1, log)
    with pytest.raises(RegistryError):
        state.resolve([Reference("n", "name-value", 1)], "wrapper-value")  # the default context has no name-value
    assert state.resolve([Reference("n", "name-value", 1)], ":.shared:wrapper-value") == {"n": '"string"'}
    assert state.resolve([Reference("n", ":.shared:name-value", 1)], "wrapper-value") == {"n": '"string"'}


def test_references_of_references_are_resolved_for_the_parser():
    state, log = RegistryState(), []
    register(state, "address-value", json.dumps({"type": "record", "name": "shop.Address", "fields": [{"name": "city", "type": "string"}]}), log)
    person = {"type": "record", "name": "shop.Person", "fields": [{"name": "home", "type": "shop.Address"}]}
    planned = state.plan_register("person-value", "AVRO", json.dumps(person), (Reference("shop.Address", "address-value", 1),))
    apply_all(state, planned.records, log)
    order = {"type": "record", "name": "shop.Order", "fields": [{"name": "buyer", "type": "shop.Person"}]}
    # The order names only shop.Person; shop.Person's own reference comes with it.
    references = (Reference("shop.Person", "person-value", 1),)
    assert set(state.resolve(references, "order-value")) == {"shop.Person", "shop.Address"}
    assert state.plan_register("order-value", "AVRO", json.dumps(order), references).schema_id == 3
