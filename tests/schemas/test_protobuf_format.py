"""Protobuf: strict parsing, imports from references, canonical texts, Confluent's rules per level, payloads."""

from __future__ import annotations

import pytest
from google.protobuf import message_factory

from protocol.schema_formats.formats import SchemaInvalid, compatibility_errors, parse_schema, payload_error
from tests.schemas._compatibility import check_evolution, check_table_has_both_verdicts


def proto3(body: str, package: str = "shop") -> str:
    header = 'syntax = "proto3";\n' + (f"package {package};\n" if package else "")
    return header + body


def proto2(body: str) -> str:
    return 'syntax = "proto2";\npackage shop;\n' + body


def parse(text, references=None):
    return parse_schema("PROTOBUF", text, references)


STATUS = "message Status { string text = 1; }\n"

# (rule, old, new, BACKWARD compatible, FORWARD compatible, the rule name every incompatible verdict gives).
EVOLUTIONS = [
    (
        "field added",
        proto3("message M { string a = 1; }"),
        proto3("message M { string a = 1; float b = 2; }"),
        True,
        True,
        "",
    ),
    (
        "field removed",
        proto3("message M { string a = 1; string b = 2; }"),
        proto3("message M { string a = 1; }"),
        True,
        True,
        "",
    ),
    (
        "field renumbered (removed and added)",
        proto3("message M { string a = 1; }"),
        proto3("message M { string a = 2; }"),
        True,
        True,
        "",
    ),
    (
        "field renamed",
        proto3("message M { string a = 1; }"),
        proto3("message M { string renamed = 1; }"),
        True,
        True,
        "",
    ),
    ("int32 to int64", proto3("message M { int32 a = 1; }"), proto3("message M { int64 a = 1; }"), True, True, ""),
    ("uint32 to bool", proto3("message M { uint32 a = 1; }"), proto3("message M { bool a = 1; }"), True, True, ""),
    ("sint32 to sint64", proto3("message M { sint32 a = 1; }"), proto3("message M { sint64 a = 1; }"), True, True, ""),
    (
        "fixed32 to sfixed32",
        proto3("message M { fixed32 a = 1; }"),
        proto3("message M { sfixed32 a = 1; }"),
        True,
        True,
        "",
    ),
    ("string to bytes", proto3("message M { string a = 1; }"), proto3("message M { bytes a = 1; }"), True, True, ""),
    (
        "int32 to sint32 (zigzag)",
        proto3("message M { int32 a = 1; }"),
        proto3("message M { sint32 a = 1; }"),
        False,
        False,
        "FIELD_SCALAR_KIND_CHANGED",
    ),
    (
        "float to double",
        proto3("message M { float a = 1; }"),
        proto3("message M { double a = 1; }"),
        False,
        False,
        "FIELD_SCALAR_KIND_CHANGED",
    ),
    (
        "fixed64 to int64",
        proto3("message M { fixed64 a = 1; }"),
        proto3("message M { int64 a = 1; }"),
        False,
        False,
        "FIELD_SCALAR_KIND_CHANGED",
    ),
    (
        "int32 to an enum",
        proto3("message M { int32 a = 1; }"),
        proto3("message M { Kind a = 1; }\nenum Kind { ZERO = 0; ONE = 1; }"),
        True,
        True,
        "",
    ),
    (
        "enum to bool",
        proto3("message M { Kind a = 1; }\nenum Kind { ZERO = 0; }"),
        proto3("message M { bool a = 1; }"),
        True,
        True,
        "",
    ),
    (
        "enum to sint32",
        proto3("message M { Kind a = 1; }\nenum Kind { ZERO = 0; }"),
        proto3("message M { sint32 a = 1; }"),
        False,
        False,
        "FIELD_SCALAR_KIND_CHANGED",
    ),
    (
        "enum field to another enum type",
        proto3("message M { Kind a = 1; }\nenum Kind { ZERO = 0; }\nenum Sort { NONE = 0; }"),
        proto3("message M { Sort a = 1; }\nenum Kind { ZERO = 0; }\nenum Sort { NONE = 0; }"),
        True,
        True,
        "",
    ),
    (
        "int32 to a message",
        proto3("message M { int32 a = 1; }\n" + STATUS),
        proto3("message M { Status a = 1; }\n" + STATUS),
        False,
        False,
        "FIELD_KIND_CHANGED",
    ),
    (
        "message field to another message type",
        proto3("message M { A a = 1; }\nmessage A { string s = 1; }\nmessage B { string s = 1; }"),
        proto3("message M { B a = 1; }\nmessage A { string s = 1; }\nmessage B { string s = 1; }"),
        False,
        False,
        "FIELD_NAMED_TYPE_CHANGED",
    ),
    (
        "same type, qualified differently",
        proto3("message M { Status s = 1; message Status { string t = 1; } }"),
        proto3("message M { .shop.M.Status s = 1; message Status { string t = 1; } }"),
        True,
        True,
        "",
    ),
    (
        "map value type changed",
        proto3("message M { map<string, int32> m = 1; }"),
        proto3("message M { map<string, string> m = 1; }"),
        False,
        False,
        "map value",
    ),
    (
        "map value widened",
        proto3("message M { map<string, int32> m = 1; }"),
        proto3("message M { map<string, int64> m = 1; }"),
        True,
        True,
        "",
    ),
    (
        "map key changed",
        proto3("message M { map<string, int32> m = 1; }"),
        proto3("message M { map<sint32, int32> m = 1; }"),
        False,
        False,
        "map key",
    ),
    (
        "map field renamed",
        proto3("message M { map<string, int32> m = 1; }"),
        proto3("message M { map<string, int32> renamed = 1; }"),
        True,
        True,
        "",
    ),
    (
        "map to repeated message",
        proto3("message M { map<string, int32> m = 1; }\n" + STATUS),
        proto3("message M { repeated Status m = 1; }\n" + STATUS),
        False,
        False,
        "FIELD_KIND_CHANGED",
    ),
    (
        "string made repeated",
        proto3("message M { string a = 1; }"),
        proto3("message M { repeated string a = 1; }"),
        True,
        True,
        "",
    ),
    (
        "message made repeated",
        proto3("message M { Status a = 1; }\n" + STATUS),
        proto3("message M { repeated Status a = 1; }\n" + STATUS),
        True,
        True,
        "",
    ),
    (
        "optional int32 made repeated",
        proto3("message M { optional int32 a = 1; }"),
        proto3("message M { repeated int32 a = 1; }"),
        False,
        False,
        "FIELD_NUMERIC_LABEL_CHANGED",
    ),
    (
        "proto3 optional added",
        proto3("message M { int32 a = 1; }"),
        proto3("message M { optional int32 a = 1; }"),
        True,
        True,
        "",
    ),
    (
        "required field added",
        proto2("message M { optional string a = 1; }"),
        proto2("message M { optional string a = 1; required string b = 2; }"),
        False,
        False,
        "REQUIRED_FIELD_",
    ),
    (
        "required field removed",
        proto2("message M { optional string a = 1; required string b = 2; }"),
        proto2("message M { optional string a = 1; }"),
        False,
        False,
        "REQUIRED_FIELD_",
    ),
    (
        "optional field made required",
        proto2("message M { optional string a = 1; }"),
        proto2("message M { required string a = 1; }"),
        False,
        False,
        "REQUIRED_FIELD_",
    ),
    (
        "one field moved into a new oneof",
        proto3("message M { string a = 1; string b = 2; }"),
        proto3("message M { string a = 1; oneof choice { string b = 2; int32 c = 3; } }"),
        True,
        True,
        "",
    ),
    (
        "a field moved out of a oneof that stays",
        proto3("message M { oneof choice { string a = 1; string b = 2; } }"),
        proto3("message M { string a = 1; oneof choice { string b = 2; } }"),
        False,
        False,
        "ONEOF",
    ),
    (
        "two fields moved into a new oneof",
        proto3("message M { string a = 1; string b = 2; }"),
        proto3("message M { oneof choice { string a = 1; string b = 2; } }"),
        False,
        True,  # FORWARD sees the oneof removed as a whole
        "MULTIPLE_FIELDS_MOVED_TO_ONEOF",
    ),
    (
        "a field moved into an existing oneof",
        proto3("message M { string a = 1; oneof choice { string b = 2; string c = 3; } }"),
        proto3("message M { oneof choice { string a = 1; string b = 2; string c = 3; } }"),
        False,
        False,
        "ONEOF",
    ),
    (
        "field added to a oneof",
        proto3("message M { oneof choice { string a = 1; string b = 2; } }"),
        proto3("message M { oneof choice { string a = 1; string b = 2; int32 c = 3; } }"),
        True,
        False,
        "ONEOF_FIELD_REMOVED",
    ),
    (
        "whole oneof removed",
        proto3("message M { string a = 1; oneof choice { string b = 2; string c = 3; } }"),
        proto3("message M { string a = 1; }"),
        True,
        True,
        "",
    ),
    # Confluent compares messages both ways: FORWARD sees an added message as one the old schema lacks.
    (
        "message added",
        proto3("message M { string a = 1; }"),
        proto3("message M { string a = 1; }\nmessage N { string a = 1; }"),
        True,
        False,
        "MESSAGE_REMOVED",
    ),
    (
        "message removed",
        proto3("message M { string a = 1; }\nmessage N { string a = 1; }"),
        proto3("message M { string a = 1; }"),
        False,
        True,
        "MESSAGE_REMOVED",
    ),
    (
        "messages reordered",
        proto3("message M { string a = 1; }\nmessage N { string a = 1; }"),
        proto3("message N { string a = 1; }\nmessage M { string a = 1; }"),
        True,
        True,
        "",
    ),
    (
        "nested message field changed",
        proto3("message M { message In { int32 a = 1; } In i = 1; }"),
        proto3("message M { message In { string a = 1; } In i = 1; }"),
        False,
        False,
        "M.In.a",
    ),
    (
        "package changed",
        proto3("message M { string a = 1; }", "shop"),
        proto3("message M { string a = 1; }", "store"),
        False,
        False,
        "PACKAGE_CHANGED",
    ),
    (
        "enum constant renamed and added",
        proto3("message M { Kind k = 1; }\nenum Kind { ZERO = 0; ONE = 1; }"),
        proto3("message M { Kind k = 1; }\nenum Kind { ZERO = 0; UNO = 1; TWO = 2; }"),
        True,
        True,
        "",
    ),
    (
        "unused enum removed",
        proto3("message M { string a = 1; }\nenum Kind { ZERO = 0; }"),
        proto3("message M { string a = 1; }"),
        True,
        True,
        "",
    ),
]


@pytest.mark.parametrize("rule, old, new, backward, forward, named", EVOLUTIONS, ids=[row[0] for row in EVOLUTIONS])
def test_each_rule_at_each_level(rule, old, new, backward, forward, named):
    check_evolution(parse(old), parse(new), backward, forward, named)


def test_the_table_has_a_compatible_and_an_incompatible_pair_per_level():
    check_table_has_both_verdicts(EVOLUTIONS)


def test_transitive_levels_look_at_every_earlier_version():
    # Removing a field and bringing its number back with another type: each step is compatible, the two are not.
    v1 = parse(proto3("message M { string a = 1; int32 b = 2; }"))
    v2 = parse(proto3("message M { string a = 1; }"))
    v3 = parse(proto3("message M { string a = 1; double b = 2; }"))
    for level in ("BACKWARD", "FORWARD", "FULL"):
        assert compatibility_errors(v3, [v1, v2], level) == []
        errors = compatibility_errors(v3, [v1, v2], f"{level}_TRANSITIVE")
        assert errors and all(
            "earlier schema 1 of 2" in error and "FIELD_SCALAR_KIND_CHANGED" in error for error in errors
        )


@pytest.mark.parametrize(
    "text",
    [
        'syntax = "proto3"; message { int32 a = 1; }',
        'syntax = "proto3"; message M { int32 a = ; }',
        'syntax = "proto3"; message M { int32 a = 1 }',
        'syntax = "proto3"; message M { Missing a = 1; }',
        'syntax = "proto3"; message M { int32 a = 1; string b = 1; }',
        'syntax = "proto3"; message M { int32 a = 1; } message M { int32 a = 1; }',
        'syntax = "proto3"; import "absent.proto"; message M { int32 a = 1; }',
        'syntax = "proto3"; message M { required int32 a = 1; }',
        'syntax = "proto3"; message M { map<double, int32> m = 1; }',
        'syntax = "proto3"; enum E { ONE = 1; }',
        'syntax = "proto2"; message M { optional group G = 1 { optional int32 a = 2; } }',
        'edition = "2023"; message M { int32 a = 1; }',
    ],
    ids=[
        "no-message-name",
        "no-field-number",
        "no-semicolon",
        "unknown-type",
        "duplicate-number",
        "duplicate-message",
        "import-not-a-reference",
        "required-in-proto3",
        "float-map-key",
        "proto3-enum-without-zero",
        "group",
        "edition",
    ],
)
def test_unreadable_schemas_are_refused(text):
    with pytest.raises(SchemaInvalid):
        parse(text)


COMMON = 'syntax = "proto3";\npackage common;\nmessage Money { int64 cents = 1; string currency = 2; }\n'
ORDER = proto3(
    'import "common/money.proto";\nimport "google/protobuf/timestamp.proto";\n'
    "message Order { common.Money total = 1; google.protobuf.Timestamp at = 2; }"
)


def test_imports_come_from_references_and_the_well_known_types():
    schema = parse(ORDER, {"common/money.proto": COMMON})
    assert list(schema.handle.file_proto.dependency) == ["common/money.proto", "google/protobuf/timestamp.proto"]
    with pytest.raises(SchemaInvalid):
        parse(ORDER)
    # A reference importing another reference.
    wrapper = 'syntax = "proto3";\npackage common;\nimport "common/money.proto";\nmessage Price { Money amount = 1; }\n'
    priced = parse(
        proto3('import "common/price.proto";\nmessage Item { common.Price price = 1; }'),
        {"common/price.proto": wrapper, "common/money.proto": COMMON},
    )
    assert payload_error(priced, b"\x00") is None
    with pytest.raises(SchemaInvalid):
        parse(ORDER, {"common/money.proto": "syntax = 'proto3'; message {"})


def test_a_referenced_types_change_is_seen_through_the_field_using_it():
    v1 = parse(ORDER, {"common/money.proto": COMMON})
    renamed_type = COMMON.replace("Money", "Amount")
    v2 = parse(ORDER.replace("common.Money", "common.Amount"), {"common/money.proto": renamed_type})
    assert any("FIELD_NAMED_TYPE_CHANGED" in error for error in compatibility_errors(v2, [v1], "BACKWARD"))


def test_layout_and_comments_do_not_change_the_canonical_text():
    tight = parse(proto3("message M { string a = 1; Kind k = 2; }\nenum Kind { ZERO = 0; }"))
    loose = parse(
        proto3(
            "// an order\nmessage   M {\n\n  string a = 1;  // its name\n  Kind k = 2;\n}\n\nenum Kind {\n  ZERO = 0;\n}\n"
        )
    )
    assert tight.canonical == loose.canonical
    assert (
        tight.canonical != parse(proto3("message M { string a = 1; Kind k = 3; }\nenum Kind { ZERO = 0; }")).canonical
    )
    qualified = parse(proto3("message M { string a = 1; .shop.Kind k = 2; }\nenum Kind { ZERO = 0; }"))
    assert qualified.canonical != tight.canonical
    assert qualified.normalized == tight.normalized
    assert ".shop.Kind k = 2;" in tight.normalized


TWO_MESSAGES = proto3(
    "message First { string a = 1; }\n"
    "message Second { int32 n = 1; repeated string tags = 2; map<string, int32> counts = 3; Inner inner = 4;\n"
    "  message Inner { bool flag = 1; }\n}\n"
)


def _message_class(schema, full_name: str):
    return message_factory.GetMessageClass(schema.handle.pool.FindMessageTypeByName(full_name))


def _zigzag(value: int) -> bytes:
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = encoded & 0x7F
        encoded >>= 7
        if encoded:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _indexes(*indexes: int) -> bytes:
    if list(indexes) == [0]:
        return b"\x00"  # Confluent's short form for the first message
    return _zigzag(len(indexes)) + b"".join(_zigzag(index) for index in indexes)


def test_payloads_made_by_protobuf_decode_by_their_message_indexes():
    schema = parse(TWO_MESSAGES)
    first = _message_class(schema, "shop.First")(a="x").SerializeToString()
    second_class = _message_class(schema, "shop.Second")
    second = second_class(n=-5, tags=["a", "b"], counts={"k": 3})
    second.inner.flag = True
    inner = _message_class(schema, "shop.Second.Inner")(flag=True).SerializeToString()
    assert payload_error(schema, _indexes(0) + first) is None
    assert payload_error(schema, _indexes(1) + second.SerializeToString()) is None
    # Second's nested types in declaration order: the map entry (CountsEntry), then Inner.
    assert payload_error(schema, _indexes(1, 1) + inner) is None
    assert "out of range" in payload_error(schema, _indexes(2) + first)
    assert "out of range" in payload_error(schema, _indexes(1, 5) + inner)
    assert "does not decode" in payload_error(schema, _indexes(1) + second.SerializeToString()[:-1])
    assert "message indexes" in payload_error(schema, b"")
    assert "message indexes" in payload_error(schema, b"\x04\x80")


def test_a_proto2_message_without_its_required_field_is_refused():
    schema = parse(proto2("message M { required string a = 1; optional int32 b = 2; }"))
    message_class = _message_class(schema, "shop.M")
    assert payload_error(schema, b"\x00" + message_class(a="x").SerializeToString()) is None
    assert "does not decode" in payload_error(schema, b"\x00" + message_class(b=1).SerializePartialToString())
