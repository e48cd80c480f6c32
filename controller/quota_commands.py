"""AlterClientQuotas and DescribeClientQuotas as pure functions of the metadata image.

An entity is a set of (type, name) pairs: "user", "client-id" or both, or
"ip" alone; a null name is that type's default entity. Its quotas are
float64 values per key. Requests and answers are the wire values of
``protocol.messages.client_quotas``; entities in the image are
``controller.metadata.image.QuotaEntity`` tuples.

AlterClientQuotas follows Kafka's ClientQuotaControlManager, entry by entry
(one result per entity):

- a key given twice in one entry, or an entity given twice in the request, is
  INVALID_REQUEST and none of that entity's changes apply (Kafka writes the
  first copy's changes even though it answers INVALID_REQUEST: we do not);
- the entity must not be empty, name each type once, use only the three
  types, and not name an empty string; "ip" goes alone, and its name must be
  an IP address (Kafka also resolves host names, which a pure planner cannot:
  a name that is not an address literal is refused);
- the keys: producer_byte_rate and consumer_byte_rate (Kafka's LONG),
  request_percentage and controller_mutation_rate (DOUBLE) for users and
  client ids; connection_creation_rate (INT) for ips. A value must be > 0,
  integral for LONG/INT (within 1e-6) and within the type's range; NaN is
  refused too (Kafka's checks let it through to a quota no rate can meet);
- a removal of a key the entity does not have, or a value equal to the
  current one, writes nothing; otherwise one ClientQuotaRecord per key.
  ``validate_only`` answers the same and writes nothing.

DescribeClientQuotas (Kafka's ClientQuotasImage.describe): each filter
component names an entity type once and matches EXACT (that name), DEFAULT
(the null name) or SPECIFIED (the entity has the type, under any name, the
default's included, as Kafka's image and tests have it); "ip" cannot be
combined with the others. ``strict`` also requires the entity to have no
other type (so a strict empty filter matches nothing, a lax one everything). A bad filter fails the whole
request (INVALID_REQUEST; UNSUPPORTED_VERSION for an unknown entity type)
with null entries. Entries are sorted by entity, values by key.
"""

from __future__ import annotations

import ipaddress
import math
from collections import Counter

from controller.metadata.image import MetadataImage, QuotaEntity, quota_entity, quota_entity_sort_key
from controller.metadata.records import CLIENT_QUOTA_ENTITY, CLIENT_QUOTA_RECORD
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = frozenset({USER, CLIENT_ID, IP})

# DescribeClientQuotas component match types.
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2

# Quota keys and their Kafka config types (QuotaConfig).
USER_AND_CLIENT_QUOTA_KEYS = {
    "producer_byte_rate": "LONG",
    "consumer_byte_rate": "LONG",
    "request_percentage": "DOUBLE",
    "controller_mutation_rate": "DOUBLE",
}
IP_QUOTA_KEYS = {"connection_creation_rate": "INT"}
# Java compares the double with the long limit converted to double.
_INTEGRAL_MAX = {"INT": float(2**31 - 1), "LONG": float(2**63 - 1)}
_TYPE_ARTICLE = {"INT": "an INT", "LONG": "a LONG"}

_ALTER = struct_classes(APIS_BY_NAME["AlterClientQuotas"].response)
_DESCRIBE = struct_classes(APIS_BY_NAME["DescribeClientQuotas"].response)


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _describe_entity(pairs) -> str:
    return "{" + ", ".join(f"{kind}={name}" for kind, name in pairs) + "}"


# ----------------------------------------------------------------------------- AlterClientQuotas


def _quota_keys(pairs: list[tuple[str, str | None]]) -> dict[str, str]:
    """The keys the entity may have (Kafka's validateEntity and configKeysForEntityType)."""
    if not pairs:
        raise _Refused(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    seen: dict[str, str | None] = {}
    for kind, name in pairs:
        if kind in seen:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Invalid client quota entity, duplicate entity entry {kind}")
        if kind not in ENTITY_TYPES:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {kind}")
        if name is not None and not name:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Empty {kind} not supported")
        seen[kind] = name
    if IP in seen:
        if USER in seen or CLIENT_ID in seen:
            raise _Refused(
                ErrorCode.INVALID_REQUEST,
                "Invalid quota entity combination, IP entity should not be combined with User or ClientId",
            )
        address = seen[IP]
        if address is not None:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise _Refused(ErrorCode.INVALID_REQUEST, f"{address} is not a valid IP or resolvable host.") from None
        return IP_QUOTA_KEYS
    return USER_AND_CLIENT_QUOTA_KEYS


def _check_value(keys: dict[str, str], key: str, value: float) -> None:
    kind = keys.get(key)
    if kind is None:
        raise _Refused(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}")
    if math.isnan(value):
        raise _Refused(ErrorCode.INVALID_REQUEST, f"Quota {key} must be a number")
    if value <= 0.0:
        raise _Refused(ErrorCode.INVALID_REQUEST, f"Quota {key} must be greater than 0")
    if kind == "DOUBLE":
        return
    if value > _INTEGRAL_MAX[kind]:
        raise _Refused(ErrorCode.INVALID_REQUEST, f"Proposed value for {key} is too large for {_TYPE_ARTICLE[kind]}.")
    if abs(math.fmod(value, 1.0)) > 1e-6:
        raise _Refused(ErrorCode.INVALID_REQUEST, f"{key} cannot be a fractional value.")


def _plan_entity(image: MetadataImage, pairs: list[tuple[str, str | None]], ops) -> list:
    """The records of one entity's ops; raises _Refused."""
    keys_in_ops = [op.key for op in ops]
    duplicated = sorted(k for k, n in Counter(keys_in_ops).items() if n > 1)
    if duplicated:
        raise _Refused(
            ErrorCode.INVALID_REQUEST,
            f"Duplicate quota key {duplicated[0]} not updating quota for this entity {_describe_entity(pairs)}",
        )
    valid_keys = _quota_keys(pairs)
    entity = quota_entity(pairs)
    current = image.client_quotas.get(entity, {})
    records = []
    for op in ops:
        if op.remove:
            if op.key in current:
                records.append(_record(entity, op.key, 0.0, True))
            continue
        _check_value(valid_keys, op.key, op.value)
        if current.get(op.key) != op.value:
            records.append(_record(entity, op.key, op.value, False))
    return records


def _record(entity: QuotaEntity, key: str, value: float, remove: bool):
    return CLIENT_QUOTA_RECORD(
        entity=[CLIENT_QUOTA_ENTITY(entity_type=kind, entity_name=name) for kind, name in entity],
        key=key,
        value=value,
        remove=remove,
    )


def _entity_data(pairs):
    return [_ALTER.EntityData(entity_type=kind, entity_name=name) for kind, name in pairs]


def plan_alter_client_quotas(image: MetadataImage, request):
    """(AlterClientQuotasResponse, ClientQuotaRecords) for a decoded request (no records when
    ``validate_only``)."""
    entries = [([(e.entity_type, e.entity_name) for e in entry.entity], entry.ops) for entry in request.entries]
    counts = Counter(quota_entity(pairs) for pairs, _ in entries)
    answered: set[QuotaEntity] = set()
    results = []
    records = []
    for pairs, ops in entries:
        entity = quota_entity(pairs)
        if counts[entity] > 1:
            if entity not in answered:
                answered.add(entity)
                results.append(
                    _ALTER.EntryData(
                        error_code=ErrorCode.INVALID_REQUEST,
                        error_message=f"Ignoring duplicate entity {_describe_entity(entity)}",
                        entity=_entity_data(pairs),
                    )
                )
            continue
        try:
            entity_records = _plan_entity(image, pairs, ops)
        except _Refused as refused:
            results.append(
                _ALTER.EntryData(error_code=refused.code, error_message=refused.message, entity=_entity_data(pairs))
            )
            continue
        records.extend(entity_records)
        results.append(_ALTER.EntryData(error_code=ErrorCode.NONE, error_message=None, entity=_entity_data(pairs)))
    response = _ALTER.AlterClientQuotasResponse(throttle_time_ms=0, entries=results)
    return response, [] if request.validate_only else records


# ----------------------------------------------------------------------------- DescribeClientQuotas


def _parse_filter(components) -> tuple[dict[str, str | None], set[str]]:
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for component in components:
        kind = component.entity_type
        if not kind:
            raise _Refused(ErrorCode.INVALID_REQUEST, "Invalid empty entity type.")
        if kind in exact or kind in specified:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Entity type {kind} cannot appear more than once in the filter.")
        if kind not in ENTITY_TYPES:
            raise _Refused(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {kind}")
        if component.match_type == MATCH_EXACT:
            if component.match is None:
                raise _Refused(
                    ErrorCode.INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null."
                )
            exact[kind] = component.match
        elif component.match_type == MATCH_DEFAULT:
            if component.match is not None:
                raise _Refused(
                    ErrorCode.INVALID_REQUEST,
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
                )
            exact[kind] = None
        elif component.match_type == MATCH_SPECIFIED:
            if component.match is not None:
                raise _Refused(
                    ErrorCode.INVALID_REQUEST,
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
                )
            specified.add(kind)
        else:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Unknown match type {component.match_type}")
    named = exact.keys() | specified
    if IP in named and (USER in named or CLIENT_ID in named):
        raise _Refused(
            ErrorCode.INVALID_REQUEST,
            "Invalid entity filter component combination. IP filter component should not be used with "
            "user or clientId filter component.",
        )
    return exact, specified


def entity_matches(entity: QuotaEntity, exact: dict[str, str | None], specified: set[str], strict: bool) -> bool:
    """Kafka's filter rule: every EXACT/DEFAULT component's type with that name, every SPECIFIED
    component's type present; strict: and no other type."""
    names = dict(entity)
    if strict and len(names) != len(exact) + len(specified):
        return False
    for kind, name in exact.items():
        if kind not in names or names[kind] != name:
            return False
    return all(kind in names for kind in specified)


def describe_client_quotas(image: MetadataImage, request):
    """DescribeClientQuotasResponse for a decoded request."""
    try:
        exact, specified = _parse_filter(request.components)
    except _Refused as refused:
        return _DESCRIBE.DescribeClientQuotasResponse(
            throttle_time_ms=0, error_code=refused.code, error_message=refused.message, entries=None
        )
    entries = []
    for entity in sorted(image.client_quotas, key=quota_entity_sort_key):
        if entity_matches(entity, exact, specified, request.strict):
            quotas = image.client_quotas[entity]
            entries.append(
                _DESCRIBE.EntryData(
                    entity=[_DESCRIBE.EntityData(entity_type=kind, entity_name=name) for kind, name in entity],
                    values=[_DESCRIBE.ValueData(key=key, value=quotas[key]) for key in sorted(quotas)],
                )
            )
    return _DESCRIBE.DescribeClientQuotasResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, entries=entries
    )
