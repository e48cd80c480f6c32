"""The indexed StandardAuthorizer against a plain scan of every ACL, over random ACL sets.

The scan states Kafka's rules directly (which ACLs apply to a resource, which
principal, host and operation they cover, DENY first, the no-ACL default);
the index must give the same answer for every request. A second property
checks that updating an authorizer ACL set by ACL set (``with_acls``) leaves
the same index as building it from nothing.
"""

from __future__ import annotations

import uuid
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.authorizer import (
    SUPPORTED_OPERATIONS,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAuthorizer,
)
from controller.metadata.image import AclBinding

Op = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED

# Small alphabets so that names, prefixes, principals and hosts collide often.
NAMES = st.sampled_from(["a", "ab", "abc", "abd", "b", "ba", "*", "*a", "a*"])
RESOURCE_NAMES = st.sampled_from(["", "a", "ab", "abc", "abcd", "abd", "b", "ba", "bab", "*", "*a", "a*", "c"])
RESOURCE_TYPES = st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID])
PRINCIPALS = st.sampled_from(["User:a", "User:b", "User:*", "Group:a"])
HOSTS = st.sampled_from(["*", "h1", "h2"])
OPERATIONS = st.sampled_from([op for op in AclOperation if op not in (Op.UNKNOWN, Op.ANY)])
ACLS = st.builds(
    AclBinding,
    resource_type=RESOURCE_TYPES,
    resource_name=NAMES,
    pattern_type=st.sampled_from([LITERAL, PREFIXED]),
    principal=PRINCIPALS,
    host=HOSTS,
    operation=OPERATIONS,
    permission_type=st.sampled_from([ALLOW, DENY]),
)
REQUESTS = st.tuples(
    st.sampled_from(["User:a", "User:b", "Group:a", "User:c"]),
    st.sampled_from(["h1", "h2"]),
    OPERATIONS,
    RESOURCE_TYPES,
    RESOURCE_NAMES,
)
SETTINGS = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

IMPLIES = {
    Op.DESCRIBE: {Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
    Op.DESCRIBE_CONFIGS: {Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS},
}


def applies_to(acl: AclBinding, resource_type, name: str) -> bool:
    if acl.resource_type != resource_type:
        return False
    if acl.pattern_type == LITERAL:
        return acl.resource_name in (name, "*")
    return name.startswith(acl.resource_name)


def scan_authorize(acls, super_users, allow_everyone, principal, host, op, resource_type, name) -> bool:
    if principal in super_users:
        return True
    applicable = [a for a in acls if applies_to(a, resource_type, name)]
    if not applicable:
        return allow_everyone
    allowed = False
    for a in applicable:
        if a.principal not in (principal, "User:*") or a.host not in ("*", host):
            continue
        if a.permission_type == DENY:
            if a.operation in (Op.ALL, op):
                return False
        elif a.operation == Op.ALL or a.operation in IMPLIES.get(op, {op}):
            allowed = True
    return allowed


def scan_by_resource_type(acls, super_users, allow_everyone, principal, host, op, resource_type) -> bool:
    if scan_authorize(acls, super_users, allow_everyone, principal, host, op, resource_type, "hardcode"):
        return True
    mine = [
        a
        for a in acls
        if a.resource_type == resource_type
        and a.principal in (principal, "User:*")
        and a.host in ("*", host)
        and a.operation in (op, Op.ALL)
    ]
    if any(a.permission_type == DENY and a.pattern_type == LITERAL and a.resource_name == "*" for a in mine):
        return False
    if any(a.permission_type == ALLOW and a.pattern_type == LITERAL and a.resource_name == "*" for a in mine):
        return True
    deny_literal = {a.resource_name for a in mine if a.permission_type == DENY and a.pattern_type == LITERAL}
    deny_prefixes = {a.resource_name for a in mine if a.permission_type == DENY and a.pattern_type == PREFIXED}
    for a in mine:
        if a.permission_type != ALLOW:
            continue
        if a.pattern_type == LITERAL and a.resource_name in deny_literal:
            continue
        if not any(a.resource_name.startswith(p) for p in deny_prefixes if p):
            return True
    return False


@SETTINGS
@given(
    acls=st.lists(ACLS, max_size=25),
    super_users=st.sets(st.sampled_from(["User:a", "Group:a"]), max_size=1),
    allow_everyone=st.booleans(),
    requests=st.lists(REQUESTS, min_size=1, max_size=20),
)
def test_index_answers_as_a_scan(acls, super_users, allow_everyone, requests):
    authz = StandardAuthorizer(
        {uuid.UUID(int=i + 1): a for i, a in enumerate(acls)},
        super_users=super_users,
        allow_everyone_if_no_acl_found=allow_everyone,
    )
    for principal, host, op, resource_type, name in requests:
        expected = scan_authorize(acls, super_users, allow_everyone, principal, host, op, resource_type, name)
        assert authz.authorize(principal, host, op, resource_type, name) is expected, (
            principal,
            host,
            op,
            resource_type,
            name,
        )
        expected_ops = {
            o
            for o in SUPPORTED_OPERATIONS[resource_type]
            if scan_authorize(acls, super_users, allow_everyone, principal, host, o, resource_type, name)
        }
        assert authz.authorized_operations(principal, host, resource_type, name) == expected_ops
        assert authz.authorize_by_resource_type(principal, host, op, resource_type) is scan_by_resource_type(
            acls, super_users, allow_everyone, principal, host, op, resource_type
        )
        # What the index looks at is exactly the applicable ACLs of the two principals.
        wanted = Counter(a for a in acls if applies_to(a, resource_type, name) and a.principal in (principal, "User:*"))
        assert Counter(authz.candidates(principal, resource_type, name)) == wanted


def index_contents(authz: StandardAuthorizer):
    contents = {}
    for resource_type, section in authz._sections.items():
        assert section.literal or section.prefixed, "an empty section is kept"
        assert section.prefix_lengths == tuple(sorted({len(p) for p in section.prefixed}))
        for prefixed, by_name in ((False, section.literal), (True, section.prefixed)):
            for name, bucket in by_name.items():
                assert bucket, "an empty bucket is kept"
                for principal, acls in bucket.items():
                    assert acls, "an empty principal entry is kept"
                    contents[(resource_type, prefixed, name, principal)] = Counter(acls)
    return contents


@SETTINGS
@given(data=st.data(), start=st.lists(ACLS, max_size=20))
def test_updating_equals_rebuilding(data, start):
    counter = iter(range(1000, 10**6))
    current = {uuid.UUID(int=next(counter)): acl for acl in start}
    authz = StandardAuthorizer(current)
    for _ in range(data.draw(st.integers(1, 6))):
        if data.draw(st.booleans()):
            # As the metadata delta changes a map: a copy, ids removed in place,
            # bindings replaced under their id, new ids appended.
            new = dict(current)
            for acl_id in data.draw(st.lists(st.sampled_from(sorted(new)), unique=True)) if new else []:
                if data.draw(st.booleans()):
                    del new[acl_id]
                else:
                    new[acl_id] = data.draw(ACLS)
            for acl in data.draw(st.lists(ACLS, max_size=5)):
                new[uuid.UUID(int=next(counter))] = acl
        else:
            # Any other map: equal ids as other objects, in another order.
            new = {uuid.UUID(int=k.int): v for k, v in reversed(list(current.items())) if data.draw(st.booleans())}
            new.update({uuid.UUID(int=next(counter)): acl for acl in data.draw(st.lists(ACLS, max_size=5))})
        authz = authz.with_acls(new)
        current = new
        assert index_contents(authz) == index_contents(StandardAuthorizer(new))
        assert authz.acl_count == len(new)
