"""The cluster link's client of a source cluster against a real broker: it
agrees versions with ApiVersions, learns brokers from Metadata, sends requests
to a named broker, and refuses link settings it cannot use, naming the key."""

from __future__ import annotations

import asyncio

import pytest

from broker.links.source import (
    SourceCluster,
    SourceConfigError,
    SourceUnavailable,
    link_client_security,
    parse_bootstrap_servers,
)
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.interop._support import create_topic, unique_topic

LIST_OFFSETS = APIS_BY_NAME["ListOffsets"]
_L = struct_classes(LIST_OFFSETS.request)


def test_bootstrap_servers_are_parsed_or_refused():
    assert parse_bootstrap_servers("a:1, b:9092") == [("a", 1), ("b", 9092)]
    assert parse_bootstrap_servers("[::1]:9092") == [("::1", 9092)]
    for bad in ("", "a", "a:x", "a:0", ":9092"):
        with pytest.raises(SourceConfigError, match="bootstrap.servers"):
            parse_bootstrap_servers(bad)


@pytest.mark.parametrize(
    "configs, key",
    [
        ({"security.protocol": "KERBEROS"}, "security.protocol"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI",
          "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="b";'},
         "sasl.mechanism"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "sasl.jaas.config"),
        ({"security.protocol": "SSL", "ssl.truststore.type": "JKS", "ssl.truststore.location": "x.jks"}, "ssl.truststore.type"),
    ],
)
def test_unusable_security_settings_name_the_key(configs, key):
    with pytest.raises(SourceConfigError, match=key):
        link_client_security("east", configs)


def test_sasl_settings_give_the_principal():
    security = link_client_security("east", {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="mirror" password="pw";',
    })
    assert (security.protocol, security.sasl_mechanism, security.principal) == ("SASL_PLAINTEXT", "SCRAM-SHA-256", "User:mirror")


def test_metadata_versions_and_requests_to_a_named_broker(shared_broker):
    topic = unique_topic("src")
    create_topic(shared_broker.bootstrap, topic, partitions=2)

    async def scenario():
        source = SourceCluster("east", {"bootstrap.servers": shared_broker.bootstrap}, client_id="test-link")
        try:
            metadata = await source.metadata([topic])
            assert list(source.brokers) == [b.node_id for b in metadata.brokers]
            (found,) = metadata.topics
            assert found.error_code == ErrorCode.NONE and len(found.partitions) == 2
            leader = found.partitions[0].leader_id
            assert source.version_for(leader, APIS_BY_NAME["Metadata"]) == 12

            def body(version):
                return _L.ListOffsetsRequest(
                    replica_id=-1, isolation_level=0,
                    topics=[_L.ListOffsetsTopic(name=topic, partitions=[_L.ListOffsetsPartition(partition_index=0, timestamp=-1)])],
                )

            version, answer = await source.request_node(leader, LIST_OFFSETS, body)
            assert version == source.version_for(leader, LIST_OFFSETS) and version >= 7
            assert answer.topics[0].partitions[0].error_code == ErrorCode.NONE
            with pytest.raises(SourceUnavailable, match="not known"):
                await source.request_node(4242, LIST_OFFSETS, body)
        finally:
            source.close()

    asyncio.run(scenario())


def test_no_source_broker_answering_is_said_once_with_every_address():
    async def scenario():
        source = SourceCluster("east", {"bootstrap.servers": "127.0.0.1:1,127.0.0.1:2", "request.timeout.ms": "2000"},
                               client_id="test-link")
        try:
            with pytest.raises(SourceUnavailable, match="127.0.0.1:1.*127.0.0.1:2|127.0.0.1:2.*127.0.0.1:1"):
                await source.metadata(None)
        finally:
            source.close()

    asyncio.run(scenario())


def test_a_source_that_accepts_but_never_answers_is_named_with_the_timeout():
    """A cut network looks like this: the request's timeout ends it, and the status says which and after how long."""

    async def scenario():
        held = []

        async def accept_and_stay_silent(reader, writer):
            held.append(writer)

        server = await asyncio.start_server(accept_and_stay_silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        source = SourceCluster("east", {"bootstrap.servers": f"127.0.0.1:{port}", "request.timeout.ms": "300"},
                               client_id="test-link")
        try:
            with pytest.raises(SourceUnavailable) as failed:
                await source.metadata(None)
            assert f"127.0.0.1:{port}: no answer from 127.0.0.1:{port} to ApiVersions within 300 ms" in str(failed.value)
        finally:
            source.close()
            for writer in held:
                writer.close()
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())
