"""The ACL admin APIs through confluent-kafka's AdminClient without an authorizer, and
the start-up checks of ``authorizer.class.name``.

Without an authorizer DescribeAcls, CreateAcls and DeleteAcls are served and
answer SECURITY_DISABLED, as a Kafka broker without one does (the client raises
that error rather than "unsupported"). A node of a cluster of several nodes
configured with an authorizer does not start unless User:ANONYMOUS is a super
user (the nodes' own principal); with an authorizer, see test_authorization.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.interop._support import RawConnection

TIMEOUT_S = 30
DESCRIBE_ACLS = APIS_BY_NAME["DescribeAcls"]
SECURITY_DISABLED = 54
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _error(future) -> KafkaError:
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=TIMEOUT_S)
    return raised.value.args[0]


def test_acl_apis_answer_security_disabled(shared_broker):
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    binding = AclBinding(
        ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW
    )
    every = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    created = admin.create_acls([binding], request_timeout=TIMEOUT_S)
    assert _error(created[binding]).code() == KafkaError.SECURITY_DISABLED
    # librdkafka does not surface DescribeAcls' request-level error (it reads the
    # error code and goes on to the resources): an empty list; the raw answer below.
    assert admin.describe_acls(every, request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S) == []
    deleted = admin.delete_acls([every], request_timeout=TIMEOUT_S)
    assert _error(deleted[every]).code() == KafkaError.SECURITY_DISABLED


def test_describe_acls_answers_security_disabled_at_every_version(shared_broker):
    request = struct_classes(DESCRIBE_ACLS.request).DescribeAclsRequest(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
        principal_filter=None, host_filter=None, operation=1, permission_type=1,
    )
    with RawConnection(shared_broker) as connection:
        for version in (1, 2, 3):
            response = connection.request(DESCRIBE_ACLS, version, request)
            assert (response.error_code, response.resources) == (SECURITY_DISABLED, []), version


def test_a_node_of_several_with_an_authorizer_needs_anonymous_super_user(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text(
        "process.roles=broker\n"
        "node.id=2\n"
        "controller.quorum.voters=1@127.0.0.1:1\n"
        "controller.listener.names=CONTROLLER\n"
        "listeners=PLAINTEXT://127.0.0.1:0\n"
        f"log.dirs={tmp_path / 'logs'}\n"
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n"
        "super.users=User:admin\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "broker", "start", "--config", str(config)],
        capture_output=True, text=True, timeout=60, cwd=PROJECT_ROOT, check=False,
    )
    assert result.returncode != 0
    assert "super.users: must include User:ANONYMOUS" in result.stderr
