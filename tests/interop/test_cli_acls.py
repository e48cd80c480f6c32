"""``pybroker acls`` against a broker with an authorizer, over SASL_PLAINTEXT (PLAIN).

The tool runs as a process with ``--command-config`` naming the admin (a super
user) or alice; what it adds and removes is checked with confluent-kafka's
AdminClient.describe_acls, and the --producer set by alice producing
transactionally, which needs every ACL of the set.
"""

from __future__ import annotations

import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer
from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

from tests.interop.test_authorization import TIMEOUT_S, USERS, InProcessBroker, admin_of, settings
from tests.interop.test_cli_security import properties, run


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    broker = InProcessBroker(tmp_path_factory.mktemp("cli-acls"))
    yield broker
    broker.close()


def command_config(tmp_path, user: str):
    return properties(
        tmp_path / f"{user}.properties",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_jaas_config=f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{user}" password="{USERS[user]}";',
    )


def acls(broker, resource_type=ResourceType.ANY, name=None, pattern=ResourcePatternType.ANY) -> set[tuple]:
    binding_filter = AclBindingFilter(resource_type, name, pattern, None, None, AclOperation.ANY, AclPermissionType.ANY)
    admin = admin_of(broker)  # kept alive until the answer is in
    found = admin.describe_acls(binding_filter, request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    return {
        (b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host, b.operation.name, b.permission_type.name)
        for b in found
    }


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_add_list_and_remove(secured, tmp_path):
    admin = command_config(tmp_path, "admin")
    topic = uniq("orders")
    added = run(secured.bootstrap, "acls", "--add", "--allow-principal", "User:alice", "--operation", "Read",
                "--operation", "DescribeConfigs", "--topic", topic, "--allow-host", "10.0.0.1", config=admin)
    assert added.returncode == 0, added.stderr
    pattern = f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)"
    assert f"Adding ACLs for resource `{pattern}`: " in added.stdout
    assert f"Current ACLs for resource `{pattern}`: " in added.stdout
    for operation in ("READ", "DESCRIBE_CONFIGS"):
        assert f"(principal=User:alice, host=10.0.0.1, operation={operation}, permissionType=ALLOW)" in added.stdout
    assert acls(secured, ResourceType.TOPIC, topic) == {
        ("TOPIC", topic, "LITERAL", "User:alice", "10.0.0.1", "READ", "ALLOW"),
        ("TOPIC", topic, "LITERAL", "User:alice", "10.0.0.1", "DESCRIBE_CONFIGS", "ALLOW"),
    }

    listed = run(secured.bootstrap, "acls", "--list", "--topic", topic, config=admin)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0] == f"Current ACLs for resource `{pattern}`: "
    assert len([line for line in listed.stdout.splitlines() if line.startswith(" \t(principal=")]) == 2
    everything = run(secured.bootstrap, "acls", "--list", config=admin)
    assert pattern in everything.stdout
    by_principal = run(secured.bootstrap, "acls", "--list", "--principal", "User:nobody", config=admin)
    assert by_principal.returncode == 0 and pattern not in by_principal.stdout

    # Without --force the tool asks, and anything but y keeps the ACLs.
    kept = run(secured.bootstrap, "acls", "--remove", "--topic", topic, config=admin, stdin="n\n")
    assert kept.returncode == 0 and "Are you sure" in kept.stderr
    assert len(acls(secured, ResourceType.TOPIC, topic)) == 2
    # One ACL by its principal, host and operation, then the rest of the resource.
    one = run(secured.bootstrap, "acls", "--remove", "--force", "--allow-principal", "User:alice", "--allow-host",
              "10.0.0.1", "--operation", "Read", "--topic", topic, config=admin)
    assert one.returncode == 0, one.stderr
    assert acls(secured, ResourceType.TOPIC, topic) == {("TOPIC", topic, "LITERAL", "User:alice", "10.0.0.1", "DESCRIBE_CONFIGS", "ALLOW")}
    rest = run(secured.bootstrap, "acls", "--remove", "--topic", topic, config=admin, stdin="y\n")
    assert rest.returncode == 0, rest.stderr
    assert acls(secured, ResourceType.TOPIC, topic) == set()


def test_producer_set_lets_alice_produce_transactionally(secured, tmp_path):
    admin = command_config(tmp_path, "admin")
    topic, transactional_id = uniq("invoices"), uniq("invoicer")
    alice = Producer(settings(secured, "alice", **{"transactional.id": transactional_id}))
    with pytest.raises(confluent_kafka.KafkaException):
        alice.init_transactions(5)  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED: no ACL yet
    added = run(secured.bootstrap, "acls", "--add", "--allow-principal", "User:alice", "--producer", "--topic", topic,
                "--transactional-id", transactional_id, "--idempotent", config=admin)
    assert added.returncode == 0, added.stderr
    assert acls(secured) >= {
        ("TOPIC", topic, "LITERAL", "User:alice", "*", "WRITE", "ALLOW"),
        ("TOPIC", topic, "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW"),
        ("TOPIC", topic, "LITERAL", "User:alice", "*", "CREATE", "ALLOW"),
        ("TRANSACTIONAL_ID", transactional_id, "LITERAL", "User:alice", "*", "WRITE", "ALLOW"),
        ("TRANSACTIONAL_ID", transactional_id, "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW"),
        ("BROKER", "kafka-cluster", "LITERAL", "User:alice", "*", "IDEMPOTENT_WRITE", "ALLOW"),  # librdkafka names the cluster BROKER
    }
    alice = Producer(settings(secured, "alice", **{"transactional.id": transactional_id}))
    alice.init_transactions(TIMEOUT_S)
    alice.begin_transaction()
    alice.produce(topic, b"invoice")  # the topic is auto-created: CREATE on it
    alice.commit_transaction(TIMEOUT_S)


def test_consumer_set_and_prefixed_patterns(secured, tmp_path):
    admin = command_config(tmp_path, "admin")
    prefix, group = uniq("metrics"), uniq("dashboards")
    added = run(secured.bootstrap, "acls", "--add", "--allow-principal", "User:bob", "--consumer", "--topic", prefix,
                "--group", group, "--resource-pattern-type", "prefixed", config=admin)
    assert added.returncode == 0, added.stderr
    assert acls(secured, ResourceType.ANY, None, ResourcePatternType.PREFIXED) >= {
        ("TOPIC", prefix, "PREFIXED", "User:bob", "*", "READ", "ALLOW"),
        ("TOPIC", prefix, "PREFIXED", "User:bob", "*", "DESCRIBE", "ALLOW"),
        ("GROUP", group, "PREFIXED", "User:bob", "*", "READ", "ALLOW"),
    }
    # --resource-pattern-type match lists what applies to a topic under the prefix.
    matched = run(secured.bootstrap, "acls", "--list", "--topic", prefix + "-cpu", "--resource-pattern-type", "match", config=admin)
    assert matched.returncode == 0, matched.stderr
    assert f"ResourcePattern(resourceType=TOPIC, name={prefix}, patternType=PREFIXED)" in matched.stdout
    assert "--consumer needs --group" in run(
        secured.bootstrap, "acls", "--add", "--allow-principal", "User:bob", "--consumer", "--topic", prefix, config=admin
    ).stderr


def test_refusals_are_one_line(secured, tmp_path, shared_broker):
    topic = uniq("t")
    denied = run(secured.bootstrap, "acls", "--add", "--allow-principal", "User:alice", "--topic", topic,
                 config=command_config(tmp_path, "alice"))
    assert denied.returncode == 1 and denied.stderr.count("\n") == 1, denied.stderr
    assert "CLUSTER_AUTHORIZATION_FAILED" in denied.stderr
    bad = run(secured.bootstrap, "acls", "--add", "--allow-principal", "User:alice", "--operation", "Fly", "--topic", topic,
              config=command_config(tmp_path, "admin"))
    assert bad.returncode == 2 and "not an ACL operation" in bad.stderr
    assert run(secured.bootstrap, "acls", "--add", "--allow-principal", "alice", "--topic", topic,
               config=command_config(tmp_path, "admin")).returncode == 2
    assert run(secured.bootstrap, "acls", "--add", "--list", config=command_config(tmp_path, "admin")).returncode == 2
    # A broker without an authorizer says so.
    disabled = run(shared_broker.bootstrap, "acls", "--list")
    assert disabled.returncode == 1 and "SECURITY_DISABLED" in disabled.stderr
