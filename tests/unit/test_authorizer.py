"""controller.authorizer: Kafka's StandardAuthorizer rules, case by case.

The scenarios are those Kafka documents and tests for its StandardAuthorizer
(implication, deny precedence, wildcard principal and resource, prefixes,
hosts, super users, allow.everyone.if.no.acl.found) and its default
authorizeByResourceType; tests/property/test_authorizer_model.py compares the
index with a plain scan over random ACL sets.
"""

from __future__ import annotations

import uuid

import pytest

from controller.authorizer import (
    AUTHORIZATION_ERRORS,
    SUPPORTED_OPERATIONS,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAuthorizer,
    kafka_host_address,
    known,
    operations_bitfield,
    parse_allow_everyone,
    parse_principal,
    parse_super_users,
)
from controller.metadata.image import AclBinding
from protocol.errors import ErrorCode

TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation
ANYWHERE = "10.0.0.9"


def acl(resource_type, name, pattern, principal, operation, permission, host="*") -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def authorizer(*acls: AclBinding, **config) -> StandardAuthorizer:
    return StandardAuthorizer({uuid.UUID(int=i + 1): a for i, a in enumerate(acls)}, **config)


def decisions(authz, principal, actions, host=ANYWHERE):
    return [authz.authorize(f"User:{principal}", host, op, rtype, name) for op, rtype, name in actions]


# --------------------------------------------------------------------------- operations and implication


def foo_acl(op, permission):
    return acl(TOPIC, "foo_", PREFIXED, "User:bob", op, permission)


@pytest.mark.parametrize("granted", [Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_allow_of_read_write_delete_alter_implies_describe(granted):
    assert authorizer(foo_acl(granted, ALLOW)).authorize("User:bob", ANYWHERE, Op.DESCRIBE, TOPIC, "foo_bar")


@pytest.mark.parametrize(
    "granted", [Op.CREATE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE, Op.CLUSTER_ACTION]
)
def test_other_operations_do_not_imply_describe(granted):
    assert not authorizer(foo_acl(granted, ALLOW)).authorize("User:bob", ANYWHERE, Op.DESCRIBE, TOPIC, "foo_bar")


@pytest.mark.parametrize("granted", [Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS])
def test_alter_configs_implies_describe_configs(granted):
    assert authorizer(foo_acl(granted, ALLOW)).authorize("User:bob", ANYWHERE, Op.DESCRIBE_CONFIGS, TOPIC, "foo_bar")


def test_implication_goes_one_way_only():
    authz = authorizer(foo_acl(Op.DESCRIBE, ALLOW), foo_acl(Op.DESCRIBE_CONFIGS, ALLOW))
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALTER_CONFIGS):
        assert not authz.authorize("User:bob", ANYWHERE, op, TOPIC, "foo_bar")


@pytest.mark.parametrize("denied", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_deny_does_not_imply_describe(denied):
    # The DENY says nothing about DESCRIBE; the ALLOW of DESCRIBE decides.
    authz = authorizer(foo_acl(denied, DENY), foo_acl(Op.DESCRIBE, ALLOW))
    assert authz.authorize("User:bob", ANYWHERE, Op.DESCRIBE, TOPIC, "foo_bar")
    assert not authz.authorize("User:bob", ANYWHERE, denied, TOPIC, "foo_bar")


def test_deny_alter_configs_leaves_describe_configs_and_denies_itself():
    authz = authorizer(foo_acl(Op.ALTER_CONFIGS, DENY), foo_acl(Op.DESCRIBE_CONFIGS, ALLOW))
    assert authz.authorize("User:bob", ANYWHERE, Op.DESCRIBE_CONFIGS, TOPIC, "foo_bar")
    assert not authz.authorize("User:bob", ANYWHERE, Op.ALTER_CONFIGS, TOPIC, "foo_bar")


def test_deny_describe_denies_describe_even_with_read_allowed():
    authz = authorizer(foo_acl(Op.READ, ALLOW), foo_acl(Op.DESCRIBE, DENY))
    assert not authz.authorize("User:bob", ANYWHERE, Op.DESCRIBE, TOPIC, "foo_bar")
    assert authz.authorize("User:bob", ANYWHERE, Op.READ, TOPIC, "foo_bar")


# --------------------------------------------------------------------------- principals, resources, hosts


def test_principal_must_match_or_be_the_wildcard():
    authz = authorizer(foo_acl(Op.READ, ALLOW), acl(GROUP, "bar", LITERAL, "User:*", Op.READ, DENY))
    assert authz.authorize("User:bob", ANYWHERE, Op.READ, TOPIC, "foo_bar")
    assert not authz.authorize("User:alice", ANYWHERE, Op.READ, TOPIC, "foo_bar")
    assert not authz.authorize("User:alice", ANYWHERE, Op.READ, GROUP, "bar")
    # The wildcard principal covers principals of any type, not only User.
    assert not authorizer(acl(GROUP, "g", LITERAL, "User:*", Op.READ, ALLOW)).authorize(
        "Group:x", ANYWHERE, Op.READ, GROUP, "h"
    )
    assert authorizer(acl(GROUP, "g", LITERAL, "User:*", Op.READ, ALLOW)).authorize(
        "Group:x", ANYWHERE, Op.READ, GROUP, "g"
    )


def test_principals_are_compared_exactly():
    authz = authorizer(acl(TOPIC, "t", LITERAL, "User:Alice", Op.READ, ALLOW))
    assert not authz.authorize("User:alice", ANYWHERE, Op.READ, TOPIC, "t")
    assert not authz.authorize("Group:Alice", ANYWHERE, Op.READ, TOPIC, "t")
    assert authz.authorize("User:Alice", ANYWHERE, Op.READ, TOPIC, "t")


def test_simple_authorizations():
    authz = authorizer(
        foo_acl(Op.READ, ALLOW),
        foo_acl(Op.WRITE, ALLOW),
        acl(GROUP, "bar", LITERAL, "User:*", Op.DESCRIBE_CONFIGS, ALLOW),
        acl(GROUP, "bar", LITERAL, "User:*", Op.ALTER_CONFIGS, ALLOW),
        super_users={"User:superman"},
    )
    assert authz.authorize("User:bob", ANYWHERE, Op.READ, TOPIC, "foo_")
    assert authz.authorize("User:fred", ANYWHERE, Op.ALTER_CONFIGS, GROUP, "bar")
    assert not authz.authorize("User:fred", ANYWHERE, Op.READ, GROUP, "bar")


def test_deny_takes_precedence_with_operation_all():
    authz = authorizer(
        acl(TOPIC, "foo", LITERAL, "User:alice", Op.ALL, DENY),
        acl(TOPIC, "foo", PREFIXED, "User:alice", Op.READ, ALLOW),
        acl(TOPIC, "foo", LITERAL, "User:*", Op.ALL, DENY),
        acl(TOPIC, "foo", PREFIXED, "User:*", Op.DESCRIBE, ALLOW),
    )
    actions = [
        (Op.WRITE, TOPIC, "foo"),
        (Op.READ, TOPIC, "foo"),
        (Op.DESCRIBE, TOPIC, "foo"),
        (Op.READ, TOPIC, "foobar"),
    ]
    assert decisions(authz, "alice", actions) == [False, False, False, True]
    actions = [
        (Op.DESCRIBE, TOPIC, "foo"),
        (Op.READ, TOPIC, "foo"),
        (Op.WRITE, TOPIC, "foo"),
        (Op.DESCRIBE, TOPIC, "foobaz"),
        (Op.READ, TOPIC, "foobaz"),
    ]
    assert decisions(authz, "bob", actions) == [False, False, False, True, False]


def test_operation_all_allows_everything():
    authz = authorizer(
        acl(TOPIC, "foo", LITERAL, "User:*", Op.ALL, ALLOW),
        acl(TOPIC, "bar", PREFIXED, "User:alice", Op.ALL, ALLOW),
        acl(TOPIC, "baz", LITERAL, "User:bob", Op.ALL, ALLOW),
    )
    assert decisions(
        authz, "alice", [(Op.WRITE, TOPIC, "foo"), (Op.DESCRIBE_CONFIGS, TOPIC, "bar"), (Op.DESCRIBE, TOPIC, "baz")]
    ) == [True, True, False]
    assert decisions(
        authz, "bob", [(Op.WRITE, TOPIC, "foo"), (Op.READ, TOPIC, "bar"), (Op.DESCRIBE, TOPIC, "baz")]
    ) == [True, False, True]
    assert decisions(
        authz, "malory", [(Op.DESCRIBE, TOPIC, "foo"), (Op.WRITE, TOPIC, "bar"), (Op.READ, TOPIC, "baz")]
    ) == [True, False, False]


def test_host_addresses():
    local, host1, host2 = "127.0.0.1", "192.168.1.1", "192.168.1.2"
    authz = authorizer(
        acl(TOPIC, "foo", LITERAL, "User:alice", Op.READ, DENY, host=host1),
        acl(TOPIC, "foo", LITERAL, "User:alice", Op.READ, ALLOW),
        acl(TOPIC, "bar", LITERAL, "User:bob", Op.READ, ALLOW, host=host2),
        acl(TOPIC, "bar", LITERAL, "User:*", Op.DESCRIBE, ALLOW, host=local),
    )
    actions = [(Op.READ, TOPIC, "foo"), (Op.READ, TOPIC, "bar"), (Op.DESCRIBE, TOPIC, "bar")]
    assert decisions(authz, "alice", actions, local) == [True, False, True]
    assert decisions(authz, "alice", actions, host1) == [False, False, False]
    assert decisions(authz, "alice", actions, host2) == [True, False, False]
    assert decisions(authz, "bob", actions, local) == [False, False, True]
    assert decisions(authz, "bob", actions, host1) == [False, False, False]
    assert decisions(authz, "bob", actions, host2) == [False, True, True]


def test_many_acls_with_prefixes_and_wildcards():
    authz = authorizer(
        acl(TOPIC, "green2", LITERAL, "User:*", Op.READ, ALLOW),
        acl(TOPIC, "green", PREFIXED, "User:bob", Op.READ, ALLOW),
        acl(TOPIC, "betamax4", LITERAL, "User:bob", Op.READ, ALLOW),
        acl(TOPIC, "betamax", LITERAL, "User:bob", Op.READ, ALLOW),
        acl(TOPIC, "beta", PREFIXED, "User:*", Op.READ, ALLOW),
        acl(TOPIC, "alpha", PREFIXED, "User:*", Op.READ, ALLOW),
        acl(TOPIC, "alp", PREFIXED, "User:bob", Op.READ, DENY),
        acl(GROUP, "*", LITERAL, "User:bob", Op.WRITE, ALLOW),
        acl(GROUP, "wheel", LITERAL, "User:*", Op.WRITE, DENY),
    )
    assert decisions(authz, "bob", [(Op.READ, TOPIC, "green1"), (Op.WRITE, GROUP, "wheel")]) == [True, False]
    assert decisions(
        authz, "bob", [(Op.READ, TOPIC, "alpha"), (Op.WRITE, GROUP, "arbitrary"), (Op.READ, TOPIC, "ala")]
    ) == [False, True, False]
    # A literal ACL whose name is a prefix of the resource's does not apply to it.
    assert decisions(
        authz, "bob", [(Op.READ, TOPIC, "betamax"), (Op.READ, TOPIC, "betamax4"), (Op.READ, TOPIC, "betamax41")]
    ) == [True, True, True]
    assert decisions(
        authz, "carol", [(Op.READ, TOPIC, "betamax4"), (Op.READ, TOPIC, "gamma"), (Op.READ, TOPIC, "green2")]
    ) == [True, False, True]


def test_prefix_acls():
    authz = authorizer(
        acl(TOPIC, "fooa", PREFIXED, "User:alice", Op.ALL, ALLOW),
        acl(TOPIC, "foobar", LITERAL, "User:bob", Op.ALL, ALLOW),
        acl(TOPIC, "f", PREFIXED, "User:bob", Op.ALL, ALLOW),
    )
    assert decisions(
        authz, "bob", [(Op.WRITE, TOPIC, "foobarr"), (Op.READ, TOPIC, "goobar"), (Op.READ, TOPIC, "fooa")]
    ) == [True, False, True]
    assert decisions(
        authz, "alice", [(Op.DESCRIBE, TOPIC, "fooa"), (Op.WRITE, TOPIC, "bar"), (Op.READ, TOPIC, "baz")]
    ) == [True, False, False]


def test_prefixed_star_is_a_plain_prefix_and_literal_star_is_the_wildcard():
    authz = authorizer(
        acl(TOPIC, "*", PREFIXED, "User:bob", Op.READ, ALLOW), acl(GROUP, "*", LITERAL, "User:bob", Op.READ, ALLOW)
    )
    assert not authz.authorize("User:bob", ANYWHERE, Op.READ, TOPIC, "t")
    assert authz.authorize("User:bob", ANYWHERE, Op.READ, TOPIC, "*t")
    assert authz.authorize("User:bob", ANYWHERE, Op.READ, GROUP, "anything")
    assert authz.authorize("User:bob", ANYWHERE, Op.READ, GROUP, "*")


def test_resource_types_are_separate():
    authz = authorizer(acl(TOPIC, "x", LITERAL, "User:bob", Op.READ, ALLOW))
    assert authz.authorize("User:bob", ANYWHERE, Op.READ, TOPIC, "x")
    assert not authz.authorize("User:bob", ANYWHERE, Op.READ, GROUP, "x")
    assert not authz.authorize("User:bob", ANYWHERE, Op.READ, TXN, "x")


# --------------------------------------------------------------------------- configuration


def test_super_users_are_allowed_everything_even_against_a_deny():
    authz = authorizer(acl(TOPIC, "t", LITERAL, "User:*", Op.ALL, DENY), super_users={"User:alice", "User:chris"})
    assert authz.authorize("User:alice", ANYWHERE, Op.WRITE, TOPIC, "t")
    assert authz.authorize("User:chris", ANYWHERE, Op.CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    assert not authz.authorize("User:bob", ANYWHERE, Op.WRITE, TOPIC, "t")
    assert authz.authorized_operations("User:alice", ANYWHERE, TOPIC, "t") == SUPPORTED_OPERATIONS[TOPIC]


@pytest.mark.parametrize("allow_everyone", [True, False])
def test_allow_everyone_if_no_acl_found_applies_only_to_resources_without_acls(allow_everyone):
    authz = authorizer(
        acl(TOPIC, "topic1", LITERAL, "User:Alice", Op.READ, ALLOW),
        super_users={"User:alice", "User:chris"},
        allow_everyone_if_no_acl_found=allow_everyone,
    )
    # topic1 has an ACL (for someone else): Bob is denied whatever the default.
    assert not authz.authorize("User:Bob", ANYWHERE, Op.READ, TOPIC, "topic1")
    assert authz.authorize("User:Bob", ANYWHERE, Op.READ, TOPIC, "topic2") is allow_everyone


def test_an_acl_of_another_host_or_operation_still_counts_as_an_acl_on_the_resource():
    authz = authorizer(
        acl(TOPIC, "t", LITERAL, "User:carol", Op.READ, ALLOW, host="1.1.1.1"),
        acl(TOPIC, "w", PREFIXED, "User:carol", Op.WRITE, ALLOW),
        allow_everyone_if_no_acl_found=True,
    )
    assert not authz.authorize("User:bob", ANYWHERE, Op.READ, TOPIC, "t")
    assert not authz.authorize("User:bob", ANYWHERE, Op.READ, TOPIC, "wx")
    assert not authz.authorize("User:carol", ANYWHERE, Op.READ, TOPIC, "wx")
    assert authz.authorize("User:bob", ANYWHERE, Op.READ, TOPIC, "u")


def test_parse_super_users_and_default():
    assert parse_super_users(None) == frozenset()
    assert parse_super_users(" ") == frozenset()
    assert parse_super_users("User:bob;User:alice ") == {"User:bob", "User:alice"}
    assert parse_super_users(";  User:bob  ;  User:alice ") == {"User:bob", "User:alice"}
    with pytest.raises(ValueError, match="expected a string in format principalType:principalName but got bob"):
        parse_super_users("bob;:alice")
    assert parse_allow_everyone(None) is False
    assert parse_allow_everyone("true") is True
    assert parse_allow_everyone(" TRUE ") is True
    assert parse_allow_everyone("false") is False
    assert parse_allow_everyone("yes") is False
    authz = StandardAuthorizer.from_properties(
        {"super.users": "User:alice;User:chris", "allow.everyone.if.no.acl.found": "true"}
    )
    assert authz.super_users == {"User:alice", "User:chris"}
    assert authz.allow_everyone_if_no_acl_found is True
    assert StandardAuthorizer().authorize("User:x", ANYWHERE, Op.READ, TOPIC, "t") is False


def test_parse_principal():
    assert parse_principal("User:alice") == ("User", "alice")
    assert parse_principal("User:CN=a:b,O=c") == ("User", "CN=a:b,O=c")
    assert parse_principal("User:") == ("User", "")
    assert parse_principal(":x") == ("", "x")
    for bad in (None, "", "alice"):
        with pytest.raises(ValueError):
            parse_principal(bad)


def test_with_config_keeps_the_acls():
    authz = authorizer(acl(TOPIC, "t", LITERAL, "User:bob", Op.READ, ALLOW))
    changed = authz.with_config(super_users={"User:root"}, allow_everyone_if_no_acl_found=True)
    assert changed.authorize("User:root", ANYWHERE, Op.WRITE, TOPIC, "t")
    assert changed.authorize("User:x", ANYWHERE, Op.WRITE, TOPIC, "u")
    assert changed.authorize("User:bob", ANYWHERE, Op.READ, TOPIC, "t")
    assert not authz.authorize("User:root", ANYWHERE, Op.WRITE, TOPIC, "t")


# --------------------------------------------------------------------------- authorized operations


def test_authorized_operations():
    authz = authorizer(
        acl(TOPIC, "t", LITERAL, "User:bob", Op.READ, ALLOW),
        acl(TOPIC, "t", PREFIXED, "User:*", Op.ALTER_CONFIGS, ALLOW),
        acl(TOPIC, "*", LITERAL, "User:bob", Op.DELETE, DENY),
        acl(GROUP, "g", LITERAL, "User:bob", Op.ALL, ALLOW),
        acl(CLUSTER, "kafka-cluster", LITERAL, "User:bob", Op.IDEMPOTENT_WRITE, ALLOW),
    )
    assert authz.authorized_operations("User:bob", ANYWHERE, TOPIC, "t") == {
        Op.READ,
        Op.DESCRIBE,
        Op.ALTER_CONFIGS,
        Op.DESCRIBE_CONFIGS,
    }
    assert authz.authorized_operations("User:eve", ANYWHERE, TOPIC, "tx") == {Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}
    assert authz.authorized_operations("User:bob", ANYWHERE, GROUP, "g") == SUPPORTED_OPERATIONS[GROUP]
    assert authz.authorized_operations("User:bob", ANYWHERE, CLUSTER, "kafka-cluster") == {Op.IDEMPOTENT_WRITE}
    assert authz.authorized_operations("User:bob", ANYWHERE, TXN, "x") == frozenset()
    everyone = authz.with_config(super_users=(), allow_everyone_if_no_acl_found=True)
    assert everyone.authorized_operations("User:bob", ANYWHERE, TXN, "x") == SUPPORTED_OPERATIONS[TXN]
    with pytest.raises(ValueError):
        authz.authorized_operations("User:bob", ANYWHERE, ResourceType.ANY, "x")


def test_operations_bitfield():
    # READ (3) and DESCRIBE (8): Kafka's Utils.to32BitField.
    assert operations_bitfield({Op.READ, Op.DESCRIBE}) == (1 << 3) | (1 << 8) == 264
    assert operations_bitfield([]) == 0
    all_topic = operations_bitfield(SUPPORTED_OPERATIONS[TOPIC])
    assert all_topic == sum(1 << code for code in (3, 4, 5, 6, 7, 8, 10, 11))


def test_supported_operations_and_errors_are_kafkas():
    assert SUPPORTED_OPERATIONS[ResourceType.USER] == {Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS}
    assert SUPPORTED_OPERATIONS[ResourceType.DELEGATION_TOKEN] == {Op.DESCRIBE}
    assert SUPPORTED_OPERATIONS[TXN] == {Op.DESCRIBE, Op.WRITE}
    assert AUTHORIZATION_ERRORS[TOPIC] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert AUTHORIZATION_ERRORS[TXN] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert AUTHORIZATION_ERRORS[CLUSTER] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert AUTHORIZATION_ERRORS[GROUP] == ErrorCode.GROUP_AUTHORIZATION_FAILED


def test_codes_are_kafkas():
    assert [
        int(t)
        for t in (
            ResourceType.TOPIC,
            ResourceType.GROUP,
            ResourceType.CLUSTER,
            ResourceType.TRANSACTIONAL_ID,
            ResourceType.DELEGATION_TOKEN,
            ResourceType.USER,
        )
    ] == [2, 3, 4, 5, 6, 7]
    assert (PatternType.ANY, PatternType.MATCH, PatternType.LITERAL, PatternType.PREFIXED) == (1, 2, 3, 4)
    assert [int(op) for op in AclOperation] == list(range(15))
    assert (AclPermissionType.DENY, AclPermissionType.ALLOW) == (2, 3)
    assert known(ResourceType, 99) == ResourceType.UNKNOWN and known(AclOperation, 14) == Op.DESCRIBE_TOKENS


# --------------------------------------------------------------------------- authorize by resource type


def by_type(authz, op, rtype, principal="User:user1", host="192.168.1.1"):
    return authz.authorize_by_resource_type(principal, host, op, rtype)


def test_by_resource_type_allow_then_deny_then_removed():
    allow_read = acl(TOPIC, "sb1", LITERAL, "User:user1", Op.READ, ALLOW, host="192.168.1.1")
    deny_read = acl(TOPIC, "sb1", LITERAL, "User:user1", Op.READ, DENY, host="192.168.1.1")
    assert not by_type(authorizer(), Op.READ, TOPIC)
    assert by_type(authorizer(allow_read), Op.READ, TOPIC)
    assert not by_type(authorizer(allow_read, deny_read), Op.READ, TOPIC)
    assert not by_type(authorizer(deny_read), Op.READ, TOPIC)


def test_by_resource_type_unrelated_denies_do_not_dominate():
    h1, h2 = "192.168.1.1", "192.168.1.2"
    authz = authorizer(
        acl(TOPIC, "sb1", LITERAL, "User:user1", Op.READ, DENY, host=h1),
        acl(TOPIC, "sb1", LITERAL, "User:user2", Op.READ, DENY, host=h1),
        acl(TOPIC, "sb1", LITERAL, "User:user1", Op.WRITE, DENY, host=h2),
        acl(TOPIC, "sb1", LITERAL, "User:user2", Op.READ, DENY, host=h2),
        acl(TOPIC, "sb1", LITERAL, "User:user1", Op.READ, ALLOW, host=h2),
        acl(TOPIC, "sb2", LITERAL, "User:user1", Op.READ, DENY, host=h2),
        acl(GROUP, "s", PREFIXED, "User:user1", Op.READ, DENY, host=h2),
    )
    assert not by_type(authz, Op.READ, TOPIC, host=h1)
    assert not by_type(authz, Op.READ, GROUP, host=h1)
    assert not by_type(authz, Op.READ, TXN, host=h1)
    assert not by_type(authz, Op.READ, CLUSTER, host=h1)
    assert by_type(authz, Op.READ, TOPIC, host=h2)


def test_by_resource_type_prefixed_denies_dominate_longer_names():
    allow = lambda name: acl(GROUP, name, PREFIXED, "User:user1", Op.READ, ALLOW, host="192.168.1.1")
    deny = lambda name: acl(GROUP, name, PREFIXED, "User:user1", Op.READ, DENY, host="192.168.1.1")
    steps = [
        (allow("abcde"), True),
        (deny("abcd"), False),
        (allow("abc"), True),
        (deny("a"), False),
        (allow("ab"), False),
    ]
    acls = []
    for added, expected in steps:
        acls.append(added)
        assert by_type(authorizer(*acls), Op.READ, GROUP) is expected, added


def test_by_resource_type_literal_deny_of_the_same_name_and_wildcards():
    allow_t = acl(TOPIC, "t", LITERAL, "User:user1", Op.WRITE, ALLOW)
    assert by_type(authorizer(allow_t), Op.WRITE, TOPIC)
    assert not by_type(authorizer(allow_t, acl(TOPIC, "t", LITERAL, "User:*", Op.ALL, DENY)), Op.WRITE, TOPIC)
    # A DENY on another literal name does not cover "t".
    assert by_type(authorizer(allow_t, acl(TOPIC, "t2", LITERAL, "User:user1", Op.WRITE, DENY)), Op.WRITE, TOPIC)
    # An ALLOW on "*" is enough; a DENY on "*" refuses whatever else allows.
    assert by_type(authorizer(acl(TOPIC, "*", LITERAL, "User:*", Op.WRITE, ALLOW)), Op.WRITE, TOPIC)
    assert not by_type(authorizer(allow_t, acl(TOPIC, "*", LITERAL, "User:user1", Op.WRITE, DENY)), Op.WRITE, TOPIC)
    # No implication here: READ does not give DESCRIBE on "some topic".
    assert not by_type(authorizer(acl(TOPIC, "t", LITERAL, "User:user1", Op.READ, ALLOW)), Op.DESCRIBE, TOPIC)


def test_by_resource_type_super_users_and_no_acl_default():
    assert by_type(authorizer(super_users={"User:user1"}), Op.WRITE, TOPIC)
    assert by_type(authorizer(allow_everyone_if_no_acl_found=True), Op.WRITE, TOPIC)
    # Kafka's first check authorizes a resource named "hardcode".
    assert by_type(authorizer(acl(TOPIC, "hard", PREFIXED, "User:user1", Op.WRITE, ALLOW)), Op.WRITE, TOPIC)
    with pytest.raises(ValueError):
        by_type(authorizer(), Op.ANY, TOPIC)
    with pytest.raises(ValueError):
        by_type(authorizer(), Op.WRITE, ResourceType.ANY)
    with pytest.raises(ValueError):
        by_type(authorizer(), 99, TOPIC)


# --------------------------------------------------------------------------- the index


def test_a_decision_looks_only_at_the_acls_of_its_resource():
    many = [acl(TOPIC, f"topic-{i}", LITERAL, f"User:u{i}", Op.READ, ALLOW) for i in range(3000)]
    many += [acl(TOPIC, f"pre-{i}-", PREFIXED, f"User:u{i}", Op.WRITE, ALLOW) for i in range(3000)]
    many += [acl(GROUP, f"g{i}", LITERAL, "User:*", Op.READ, ALLOW) for i in range(3000)]
    authz = authorizer(*many, acl(TOPIC, "*", LITERAL, "User:u7", Op.DESCRIBE, ALLOW))
    assert authz.acl_count == 9001
    assert authz.authorize("User:u7", ANYWHERE, Op.READ, TOPIC, "topic-7")
    assert not authz.authorize("User:u8", ANYWHERE, Op.READ, TOPIC, "topic-7")
    assert authz.authorize("User:u7", ANYWHERE, Op.WRITE, TOPIC, "pre-7-x")
    # Only the resource's own ACL, the wildcard one and the matching prefix are looked at.
    assert sorted(a.resource_name for a in authz.candidates("User:u7", TOPIC, "topic-7")) == ["*", "topic-7"]
    assert sorted(a.resource_name for a in authz.candidates("User:u7", TOPIC, "pre-7-x")) == ["*", "pre-7-"]
    # Another principal's ACLs on the same resource are not looked at either.
    assert authz.candidates("User:u8", TOPIC, "topic-7") == []


def test_with_acls_updates_only_what_changed():
    a, b, c = (acl(TOPIC, n, PREFIXED, "User:bob", Op.READ, ALLOW) for n in ("a", "bb", "ccc"))
    ids = [uuid.UUID(int=i) for i in range(1, 4)]
    base = StandardAuthorizer({ids[0]: a, ids[1]: b})
    assert base.with_acls(base._by_id) is base
    assert not base.authorize("User:bob", ANYWHERE, Op.READ, TOPIC, "ccc1")
    grown = base.with_acls({ids[0]: a, ids[1]: b, ids[2]: c})
    assert grown.authorize("User:bob", ANYWHERE, Op.READ, TOPIC, "ccc1")
    # The untouched resource type's section is shared, not rebuilt.
    other = StandardAuthorizer({ids[0]: a, ids[1]: acl(GROUP, "g", LITERAL, "User:bob", Op.READ, ALLOW)})
    shrunk = other.with_acls({ids[1]: other._by_id[ids[1]]})
    assert shrunk._sections[GROUP] is other._sections[GROUP]
    assert TOPIC not in shrunk._sections
    # An id whose binding changed is re-indexed (remove then add of the same name).
    moved = grown.with_acls({ids[0]: a, ids[1]: b, ids[2]: acl(TOPIC, "ccc", PREFIXED, "User:bob", Op.READ, DENY)})
    assert not moved.authorize("User:bob", ANYWHERE, Op.READ, TOPIC, "ccc1")
    # Two ids with equal bindings: removing one keeps the other in force.
    twice = StandardAuthorizer({ids[0]: a, ids[1]: a})
    assert twice.with_acls({ids[1]: a}).authorize("User:bob", ANYWHERE, Op.READ, TOPIC, "a1")
    assert not twice.with_acls({}).authorize("User:bob", ANYWHERE, Op.READ, TOPIC, "a1")


# --------------------------------------------------------------------------- filters and listing


def test_filters_match_as_kafkas():
    literal_foo = acl(TOPIC, "foo", LITERAL, "User:bob", Op.READ, ALLOW)
    wildcard = acl(TOPIC, "*", LITERAL, "User:bob", Op.READ, ALLOW)
    prefix_fo = acl(TOPIC, "fo", PREFIXED, "User:bob", Op.READ, ALLOW)
    prefix_foo = acl(TOPIC, "foo", PREFIXED, "User:bob", Op.READ, ALLOW)
    group = acl(GROUP, "foo", LITERAL, "User:alice", Op.WRITE, DENY, host="h")
    every = [literal_foo, wildcard, prefix_fo, prefix_foo, group]

    def selected(**fields):
        f = AclBindingFilter(**fields)
        return [a for a in every if f.matches(a)]

    assert selected() == every
    assert selected(resource_type=TOPIC) == every[:4]
    assert selected(resource_name="foo") == [literal_foo, prefix_foo, group]  # ANY: exact names, both types
    assert selected(resource_name="foo", pattern_type=LITERAL) == [literal_foo, group]
    assert selected(resource_name="foo", pattern_type=PREFIXED) == [prefix_foo]
    assert selected(resource_type=TOPIC, resource_name="foo", pattern_type=PatternType.MATCH) == [
        literal_foo,
        wildcard,
        prefix_fo,
        prefix_foo,
    ]
    assert selected(resource_name="fob", pattern_type=PatternType.MATCH) == [wildcard, prefix_fo]
    assert selected(pattern_type=PatternType.MATCH) == every  # no name: any pattern type
    assert selected(principal="User:alice") == [group]
    assert selected(host="h") == [group]
    assert selected(operation=Op.WRITE) == [group]
    assert selected(permission_type=DENY) == [group]
    assert selected(operation=Op.ALL) == []


def test_filter_unknown_parts_and_listing():
    assert AclBindingFilter().unknown_part() is None
    assert AclBindingFilter(resource_type=ResourceType.UNKNOWN).unknown_part() == "Unknown patternFilter."
    assert AclBindingFilter(pattern_type=PatternType.UNKNOWN).unknown_part() == "Unknown patternFilter."
    assert AclBindingFilter(operation=Op.UNKNOWN).unknown_part() == "Unknown entryFilter."
    assert AclBindingFilter(permission_type=AclPermissionType.UNKNOWN).unknown_part() == "Unknown entryFilter."
    foo = [acl(TOPIC, "foo_", PREFIXED, "User:bob", op, ALLOW) for op in (Op.READ, Op.WRITE)]
    bar = [acl(GROUP, "bar", LITERAL, "User:*", op, DENY) for op in (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS)]
    authz = authorizer(*foo, *bar)
    assert authz.acls(AclBindingFilter()) == foo + bar
    assert authz.acls(AclBindingFilter(resource_type=TOPIC)) == foo


# --------------------------------------------------------------------------- host addresses


@pytest.mark.parametrize(
    "address,expected",
    [
        ("192.168.1.1", "192.168.1.1"),
        ("::1", "0:0:0:0:0:0:0:1"),
        ("2001:db8::ff00:42:8329", "2001:db8:0:0:0:ff00:42:8329"),
        ("2001:0DB8:0000:0000:0000:0000:0000:0001", "2001:db8:0:0:0:0:0:1"),
        ("::ffff:10.1.2.3", "10.1.2.3"),
        ("fe80::1%eth0", "fe80:0:0:0:0:0:0:1%eth0"),
        ("not-an-address", "not-an-address"),
    ],
)
def test_kafka_host_address(address, expected):
    assert kafka_host_address(address) == expected
