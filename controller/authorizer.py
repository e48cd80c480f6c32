"""Kafka's StandardAuthorizer over the metadata image's ACLs: pure, immutable, indexed.

The vocabulary is Kafka's, with Kafka's codes: :class:`ResourceType`,
:class:`PatternType`, :class:`AclOperation`, :class:`AclPermissionType`;
principals are "Type:name" strings ("User:alice"), hosts are client addresses
as Java prints them (:func:`kafka_host_address`).

:meth:`StandardAuthorizer.authorize` decides as Kafka's StandardAuthorizerData:

- a super user (``super.users``, "User:a;User:b") is allowed everything,
  whatever the ACLs say;
- an ACL applies to a resource of its type when it is LITERAL and names the
  resource or "*", or PREFIXED and the resource's name starts with its name;
  within those, to the session's principal or "User:*", from the client's
  host or "*";
- an ALLOW of ALL allows every operation; an ALLOW of READ, WRITE, DELETE or
  ALTER also allows DESCRIBE, an ALLOW of ALTER_CONFIGS also DESCRIBE_CONFIGS.
  A DENY denies its own operation only (or every one, ALL): DENY READ leaves
  DESCRIBE alone;
- one applicable DENY wins over any number of ALLOWs;
- when no ACL at all applies to the resource (for any principal, host or
  operation), ``allow.everyone.if.no.acl.found`` decides (default: deny);
  when some do but none allows, the answer is deny.

The index answers without looking at every ACL: per resource type, ACLs by
literal name and by prefix, each split by principal, and the distinct prefix
lengths in use. One call looks at the resource's own name, "*", and one prefix
per distinct length, and in each of those at two principals (the session's
and "User:*"). An authorizer never changes: :meth:`StandardAuthorizer.with_acls`
gives the one for a new image, sharing the resource types and names the
change did not touch (a single change costs a few milliseconds with 20,000
ACLs, a decision a few microseconds).

Like Kafka's, the authorizer may only answer once the broker's image has
caught up with the metadata log (Kafka's AuthorizerNotReadyException before):
that is for whoever builds it from the image.
"""

from __future__ import annotations

import enum
import ipaddress
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

from controller.metadata.image import AclBinding
from protocol.errors import ErrorCode


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only: any pattern type, names compared exactly
    MATCH = 2  # filters only: every ACL that would apply to the named resource
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


def known(kind: type[enum.IntEnum], code: int):
    """``code`` as a member of ``kind``, UNKNOWN for a code Kafka does not define (its fromCode)."""
    try:
        return kind(code)
    except ValueError:
        return kind.UNKNOWN


WILDCARD = "*"  # a LITERAL ACL of this name applies to every resource of its type; also "any host"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource

# What each resource type's authorized_operations can contain (Kafka's AclEntry.supportedOperations).
SUPPORTED_OPERATIONS: Mapping[int, frozenset[AclOperation]] = MappingProxyType(
    {
        ResourceType.TOPIC: frozenset(
            {
                AclOperation.READ,
                AclOperation.WRITE,
                AclOperation.CREATE,
                AclOperation.DESCRIBE,
                AclOperation.DELETE,
                AclOperation.ALTER,
                AclOperation.DESCRIBE_CONFIGS,
                AclOperation.ALTER_CONFIGS,
            }
        ),
        ResourceType.GROUP: frozenset(
            {
                AclOperation.READ,
                AclOperation.DESCRIBE,
                AclOperation.DELETE,
                AclOperation.DESCRIBE_CONFIGS,
                AclOperation.ALTER_CONFIGS,
            }
        ),
        ResourceType.CLUSTER: frozenset(
            {
                AclOperation.CREATE,
                AclOperation.CLUSTER_ACTION,
                AclOperation.DESCRIBE_CONFIGS,
                AclOperation.ALTER_CONFIGS,
                AclOperation.IDEMPOTENT_WRITE,
                AclOperation.ALTER,
                AclOperation.DESCRIBE,
            }
        ),
        ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
        ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
        ResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS}),
    }
)

# The error a request gets when refused on a resource of this type (Kafka's AclEntry.authorizationError).
AUTHORIZATION_ERRORS: Mapping[int, ErrorCode] = MappingProxyType(
    {
        ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ResourceType.DELEGATION_TOKEN: ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED,
    }
)

# Only ALLOW ACLs imply: a DENY READ does not deny DESCRIBE.
_IMPLIES_DESCRIBE = frozenset(
    {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

_ALLOWED = True
_DENIED = False


# ----------------------------------------------------------------------------- configuration and helpers


def parse_principal(text: str | None) -> tuple[str, str]:
    """(type, name) of "Type:name", split at the first colon (Kafka's SecurityUtils.parseKafkaPrincipal)."""
    if not text or ":" not in text:
        raise ValueError(f"expected a string in format principalType:principalName but got {text}")
    kind, name = text.split(":", 1)
    return kind, name


def parse_super_users(value: str | None) -> frozenset[str]:
    """``super.users``: principals separated by ";" (blanks ignored); a malformed one raises ValueError."""
    users = set()
    for part in (value or "").split(";"):
        principal = part.strip()
        if principal:
            parse_principal(principal)
            users.add(principal)
    return frozenset(users)


def parse_allow_everyone(value: str | None) -> bool:
    """``allow.everyone.if.no.acl.found``: "true" in any case; anything else (or nothing) is false
    (Java's parseBoolean)."""
    return value is not None and value.strip().lower() == "true"


def operations_bitfield(operations: Iterable[int]) -> int:
    """The authorized_operations int32 of responses: bit ``code`` set per operation (Kafka's Utils.to32BitField)."""
    bits = 0
    for operation in operations:
        bits |= 1 << int(operation)
    return bits


def kafka_host_address(address: str) -> str:
    """A client address as Java's InetAddress.getHostAddress prints it, which is how Kafka's
    tools write ACL hosts: IPv4 unchanged, IPv6 as eight groups of lower-case hex without
    leading zeros and without "::" ("0:0:0:0:0:0:0:1"), an IPv4-mapped IPv6 address as its IPv4.
    Anything that is not an address is returned unchanged."""
    text, _, scope = address.partition("%")
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv4Address):
        return str(ip)
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    groups = ":".join(format(int.from_bytes(ip.packed[i : i + 2], "big"), "x") for i in range(0, 16, 2))
    return f"{groups}%{scope}" if scope else groups


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A DescribeAcls/DeleteAcls filter (Kafka's AclBindingFilter); None and ANY match anything.

    ``pattern_type`` ANY compares names exactly across both pattern types;
    MATCH with a name selects every ACL that would apply to that resource
    (LITERAL of the name or "*", PREFIXED of a prefix of it); LITERAL or
    PREFIXED select that pattern type only, names compared exactly.
    """

    resource_type: int = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: int = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = AclOperation.ANY
    permission_type: int = AclPermissionType.ANY

    @classmethod
    def from_wire(cls, value) -> AclBindingFilter:
        """From a DescribeAcls request or a DeleteAcls filter (their ``*_filter`` fields)."""
        return cls(
            known(ResourceType, value.resource_type_filter),
            value.resource_name_filter,
            known(PatternType, value.pattern_type_filter),
            value.principal_filter,
            value.host_filter,
            known(AclOperation, value.operation),
            known(AclPermissionType, value.permission_type),
        )

    def unknown_part(self) -> str | None:
        """Kafka's message when a part is UNKNOWN (such a filter is refused), else None."""
        if self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN:
            return "Unknown patternFilter."
        if self.operation == AclOperation.UNKNOWN or self.permission_type == AclPermissionType.UNKNOWN:
            return "Unknown entryFilter."
        return None

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        pattern_type = self.pattern_type
        if pattern_type not in (PatternType.ANY, PatternType.MATCH) and pattern_type != acl.pattern_type:
            return False
        name = self.resource_name
        if name is not None:
            if pattern_type == PatternType.ANY or pattern_type == acl.pattern_type:
                if name != acl.resource_name:
                    return False
            elif acl.pattern_type == PatternType.LITERAL:
                if name != acl.resource_name and acl.resource_name != WILDCARD:
                    return False
            elif acl.pattern_type == PatternType.PREFIXED:
                if not name.startswith(acl.resource_name):
                    return False
            else:
                return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != acl.operation:
            return False
        return self.permission_type == AclPermissionType.ANY or self.permission_type == acl.permission_type


# ----------------------------------------------------------------------------- the index

# principal -> the ACLs of one resource name (or prefix) for that principal
_Bucket = Mapping[str, tuple[AclBinding, ...]]


class _Section(NamedTuple):
    """The ACLs of one resource type. Never changed once published; updates copy what they touch."""

    literal: Mapping[str, _Bucket]  # by resource name ("*" included)
    prefixed: Mapping[str, _Bucket]  # by prefix
    prefix_lengths: tuple[int, ...]  # the distinct lengths of the prefixes, ascending


_EMPTY_SECTION = _Section({}, {}, ())


class _SectionEditor:
    """Applies additions and removals to one section, copying each map it changes once."""

    def __init__(self, section: _Section):
        self.literal = dict(section.literal)
        self.prefixed = dict(section.prefixed)
        self._owned: set[tuple[bool, str]] = set()  # buckets already copied
        self._prefixes_changed = False
        self._old_lengths = section.prefix_lengths

    def _bucket(self, acl: AclBinding) -> tuple[dict, dict]:
        prefixed = acl.pattern_type == PatternType.PREFIXED
        by_name = self.prefixed if prefixed else self.literal
        key = (prefixed, acl.resource_name)
        if key not in self._owned:
            self._owned.add(key)
            old = by_name.get(acl.resource_name)
            if old is None and prefixed:
                self._prefixes_changed = True
            by_name[acl.resource_name] = {} if old is None else dict(old)
        return by_name, by_name[acl.resource_name]

    def add(self, acl: AclBinding) -> None:
        _, bucket = self._bucket(acl)
        bucket[acl.principal] = bucket.get(acl.principal, ()) + (acl,)

    def remove(self, acl: AclBinding) -> None:
        by_name, bucket = self._bucket(acl)
        acls = list(bucket.get(acl.principal, ()))
        if acl in acls:
            acls.remove(acl)  # one copy: two ids may hold equal bindings
        if acls:
            bucket[acl.principal] = tuple(acls)
        else:
            bucket.pop(acl.principal, None)
        if not bucket:
            del by_name[acl.resource_name]
            # A later add of this name makes a new bucket.
            self._owned.discard((by_name is self.prefixed, acl.resource_name))
            if by_name is self.prefixed:
                self._prefixes_changed = True

    def section(self) -> _Section | None:
        if not self.literal and not self.prefixed:
            return None
        lengths = self._old_lengths
        if self._prefixes_changed:
            lengths = tuple(sorted({len(prefix) for prefix in self.prefixed}))
        return _Section(self.literal, self.prefixed, lengths)


def _edit(
    sections: Mapping[int, _Section], added: Iterable[AclBinding], removed: Iterable[AclBinding]
) -> dict[int, _Section]:
    result = dict(sections)
    editors: dict[int, _SectionEditor] = {}

    def editor(resource_type: int) -> _SectionEditor:
        found = editors.get(resource_type)
        if found is None:
            found = editors[resource_type] = _SectionEditor(result.get(resource_type, _EMPTY_SECTION))
        return found

    for acl in removed:
        if acl.resource_type in result or acl.resource_type in editors:
            editor(acl.resource_type).remove(acl)
    for acl in added:
        editor(acl.resource_type).add(acl)
    for resource_type, found in editors.items():
        section = found.section()
        if section is None:
            result.pop(resource_type, None)
        else:
            result[resource_type] = section
    return result


# ----------------------------------------------------------------------------- the authorizer


class StandardAuthorizer:
    """Authorization decisions over one set of ACLs (an image's ``acls``) and the authorizer's configuration."""

    __slots__ = ("_by_id", "_sections", "allow_everyone_if_no_acl_found", "super_users")

    def __init__(
        self,
        acls: Mapping[uuid.UUID, AclBinding] | None = None,
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ):
        self._by_id: Mapping[uuid.UUID, AclBinding] = MappingProxyType({}) if acls is None else acls
        self._sections: Mapping[int, _Section] = _edit({}, self._by_id.values(), ())
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], acls: Mapping[uuid.UUID, AclBinding] | None = None):
        """Configured from ``super.users`` and ``allow.everyone.if.no.acl.found``; ValueError on a bad principal."""
        return cls(
            acls,
            super_users=parse_super_users(properties.get("super.users")),
            allow_everyone_if_no_acl_found=parse_allow_everyone(properties.get("allow.everyone.if.no.acl.found")),
        )

    # ------------------------------------------------------------------ updates

    def _copy(self, by_id, sections, super_users, allow_everyone) -> StandardAuthorizer:
        other = object.__new__(StandardAuthorizer)
        other._by_id = by_id
        other._sections = sections
        other.super_users = super_users
        other.allow_everyone_if_no_acl_found = allow_everyone
        return other

    def with_acls(self, acls: Mapping[uuid.UUID, AclBinding]) -> StandardAuthorizer:
        """The authorizer for a new image's ``acls``; the unchanged map (same object) gives ``self``.

        Only what changed is indexed again, found by :func:`_acl_changes`
        without hashing every id; when most of it changed, the index is built
        from nothing.
        """
        if acls is self._by_id:
            return self
        removed, added = _acl_changes(self._by_id, acls)
        if not removed and not added:
            sections = self._sections
        elif len(removed) + len(added) > len(acls):
            sections = _edit({}, acls.values(), ())
        else:
            sections = _edit(self._sections, added, removed)
        return self._copy(acls, sections, self.super_users, self.allow_everyone_if_no_acl_found)

    def with_config(self, *, super_users: Iterable[str], allow_everyone_if_no_acl_found: bool) -> StandardAuthorizer:
        return self._copy(self._by_id, self._sections, frozenset(super_users), allow_everyone_if_no_acl_found)

    # ------------------------------------------------------------------ decisions

    def _buckets(self, resource_type: int, resource_name: str) -> list[_Bucket]:
        """The non-empty buckets of every ACL that applies to the resource (any principal)."""
        section = self._sections.get(resource_type)
        if section is None:
            return []
        found = []
        bucket = section.literal.get(resource_name)
        if bucket:
            found.append(bucket)
        if resource_name != WILDCARD:
            bucket = section.literal.get(WILDCARD)
            if bucket:
                found.append(bucket)
        prefixed = section.prefixed
        size = len(resource_name)
        for length in section.prefix_lengths:
            if length > size:
                break
            bucket = prefixed.get(resource_name[:length])
            if bucket:
                found.append(bucket)
        return found

    def candidates(self, principal: str, resource_type: int, resource_name: str) -> list[AclBinding]:
        """The ACLs one decision about (principal, resource) looks at: those that apply to the
        resource and name ``principal`` or "User:*". The index's cost, for tests and debugging."""
        found = []
        for bucket in self._buckets(resource_type, resource_name):
            for who in _principals(principal):
                found.extend(bucket.get(who, ()))
        return found

    def _decide(self, buckets: list[_Bucket], principal: str, host: str, operation: int) -> bool:
        if not buckets:
            return self.allow_everyone_if_no_acl_found
        allowed = False
        for bucket in buckets:
            for who in _principals(principal):
                for acl in bucket.get(who, ()):
                    verdict = _verdict(acl, host, operation)
                    if verdict is _DENIED:
                        return False
                    if verdict is _ALLOWED:
                        allowed = True
        return allowed

    def authorize(self, principal: str, host: str, operation: int, resource_type: int, resource_name: str) -> bool:
        """Whether ``principal`` from ``host`` may do ``operation`` on the resource (a literal name)."""
        if principal in self.super_users:
            return True
        return self._decide(self._buckets(resource_type, resource_name), principal, host, operation)

    def authorized_operations(
        self, principal: str, host: str, resource_type: int, resource_name: str
    ) -> frozenset[AclOperation]:
        """The operations of the resource type's supported set that ``authorize`` allows
        (Kafka's AuthHelper.authorizedOperations; :func:`operations_bitfield` makes the response's int)."""
        supported = SUPPORTED_OPERATIONS.get(resource_type)
        if supported is None:
            raise ValueError(f"not a concrete resource type: {resource_type}")
        if principal in self.super_users:
            return supported
        buckets = self._buckets(resource_type, resource_name)
        return frozenset(op for op in supported if self._decide(buckets, principal, host, op))

    def authorize_by_resource_type(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """Whether ``principal`` may do ``operation`` on at least one resource of the type (Kafka's
        Authorizer.authorizeByResourceType: e.g. an idempotent producer WRITE on some topic).

        As Kafka's: allowed when ``authorize`` allows a resource named "hardcode" (so super users
        and the no-ACL default count), when an ALLOW on "*" applies, or when some ALLOW
        applies whose name no DENY covers (a literal DENY of the same name, or a DENY prefix
        of it); any DENY on "*" refuses. Only the ACL's own operation or ALL count here (no
        implied DESCRIBE). Looks at every ACL of the type for the two principals: not for hot paths.
        """
        if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN) or resource_type not in SUPPORTED_OPERATIONS:
            raise ValueError(f"authorize_by_resource_type needs a concrete resource type, not {resource_type}")
        if (
            operation in (AclOperation.ANY, AclOperation.UNKNOWN)
            or known(AclOperation, operation) == AclOperation.UNKNOWN
        ):
            raise ValueError(f"authorize_by_resource_type needs a concrete operation, not {operation}")
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        section = self._sections.get(resource_type)
        if section is None:
            return False
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow_literal: set[str] = set()
        allow_prefixed: set[str] = set()
        wildcard_allowed = False
        for by_name, prefixed in ((section.literal, False), (section.prefixed, True)):
            for name, bucket in by_name.items():
                for who in _principals(principal):
                    for acl in bucket.get(who, ()):
                        if acl.host != WILDCARD and acl.host != host:
                            continue
                        if acl.operation != operation and acl.operation != AclOperation.ALL:
                            continue
                        if acl.permission_type == AclPermissionType.DENY:
                            if not prefixed and name == WILDCARD:
                                return False
                            (deny_prefixed if prefixed else deny_literal).add(name)
                        elif acl.permission_type == AclPermissionType.ALLOW:
                            if not prefixed and name == WILDCARD:
                                wildcard_allowed = True
                            else:
                                (allow_prefixed if prefixed else allow_literal).add(name)
        if wildcard_allowed:
            return True
        for names, literal in ((allow_literal, True), (allow_prefixed, False)):
            for name in names:
                if literal and name in deny_literal:
                    continue
                if not any(name[:end] in deny_prefixed for end in range(1, len(name) + 1)):
                    return True
        return False

    # ------------------------------------------------------------------ listing

    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """Every binding the filter matches (a scan: DescribeAcls is not a hot path), once per id."""
        return [acl for acl in self._by_id.values() if acl_filter.matches(acl)]

    @property
    def acl_count(self) -> int:
        return len(self._by_id)


def _acl_changes(old: Mapping, new: Mapping) -> tuple[list[AclBinding], list[AclBinding]]:
    """(removed, added) bindings that turn ``old``'s into ``new``'s (as multisets).

    Walks both maps in order, pairing an old entry with the next new one when
    both hold the very same id object: a map the metadata delta made from
    another keeps the others' order and objects, drops removed ids in place
    and appends new ones, so this pairs every unchanged ACL with identity
    checks only (hashing 10,000 UUIDs costs more than the rest of an update).
    Any other pair of maps still gives a correct answer, just a larger one:
    whatever is not paired is removed and added.
    """
    removed: list[AclBinding] = []
    added: list[AclBinding] = []
    new_items = list(new.items())
    count = len(new_items)
    j = 0
    for key, value in old.items():
        if j < count and new_items[j][0] is key:
            now = new_items[j][1]
            if now is not value and now != value:
                removed.append(value)
                added.append(now)
            j += 1
        else:
            removed.append(value)
    added.extend(value for _, value in new_items[j:])
    return removed, added


def _principals(principal: str) -> tuple[str, ...]:
    return (principal,) if principal == WILDCARD_PRINCIPAL else (principal, WILDCARD_PRINCIPAL)


def _verdict(acl: AclBinding, host: str, operation: int) -> bool | None:
    """ALLOWED/DENIED when ``acl`` (already matching the resource and principal) decides
    ``operation`` from ``host``, None when it says nothing about it."""
    if acl.host != WILDCARD and acl.host != host:
        return None
    acl_operation = acl.operation
    allow = acl.permission_type == AclPermissionType.ALLOW
    if acl_operation != AclOperation.ALL:
        if allow:
            if operation == AclOperation.DESCRIBE:
                if acl_operation not in _IMPLIES_DESCRIBE:
                    return None
            elif operation == AclOperation.DESCRIBE_CONFIGS:
                if acl_operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif operation != acl_operation:
                return None
        elif operation != acl_operation:
            return None
    # Kafka treats any permission but ALLOW as DENY (only the two are ever stored).
    return _ALLOWED if allow else _DENIED
