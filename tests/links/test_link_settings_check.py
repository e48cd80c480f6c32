"""A link's client settings are checked by the broker a client asks, before the
request goes on to the controller: settings the link's client could not use
(a TLS file that is missing or not PEM, SASL without credentials, a mechanism
pybroker does not speak) are refused with INVALID_CONFIG naming the key, and
nothing is stored. Driven with ``pybroker cluster-links`` against a broker
that forwards to a controller-only node (whose own checks do not read files),
and through the REST proxy."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from broker.links.source import link_settings_error
from broker.tools.client import KafkaConnection
from controller.link_commands import LinkSettingsRefused, altered_link_configs, new_link_configs
from protocol.errors import ErrorCode
from protocol.messages.cluster_links import LINK_CONFIG_DELETE, LINK_CONFIG_SET
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.conftest import BrokerProcess
from tests.interop._rest import Rest, rest_port
from tests.links.test_links_control import free_port, links
from tests.tls_certs import make_certs

_AL = struct_classes(APIS_BY_NAME["AlterClusterLinks"].request)
PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="mirror" password="s3cret";'
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="mirror" password="s3cret";'


def _set(name, value):
    return SimpleNamespace(name=name, operation=LINK_CONFIG_SET, value=value)


def _delete(name):
    return SimpleNamespace(name=name, operation=LINK_CONFIG_DELETE, value=None)


# ----------------------------------------------------------------------------- pure functions


def test_new_link_configs_are_checked_as_the_controller_checks_them():
    given = [SimpleNamespace(name="bootstrap.servers", value=" a:1 "), SimpleNamespace(name="retry.backoff.ms", value="07")]
    assert new_link_configs(given) == {"bootstrap.servers": "a:1", "retry.backoff.ms": "7"}
    for configs, code, message in (
        ([SimpleNamespace(name="bootstrap.servers", value="a:1")] * 2, ErrorCode.INVALID_CONFIG, "bootstrap.servers: given more than once"),
        ([SimpleNamespace(name="retry.backoff.ms", value="1")], ErrorCode.INVALID_CONFIG, "bootstrap.servers: required"),
    ):
        with pytest.raises(LinkSettingsRefused) as refused:
            new_link_configs(configs)
        assert (refused.value.error_code, refused.value.message) == (code, message)


def test_alterations_apply_sets_and_deletions_then_check_the_whole():
    current = {"bootstrap.servers": "a:1", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
               "sasl.jaas.config": PLAIN_JAAS}
    assert altered_link_configs(current, [_delete("sasl.jaas.config"), _set("retry.backoff.ms", "100")]) == {
        "bootstrap.servers": "a:1", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "retry.backoff.ms": "100",
    }
    assert altered_link_configs(current, [_delete("never.set.anyway.but.unknown")]) == current  # deleting an absent key is nothing
    assert current["sasl.jaas.config"] == PLAIN_JAAS  # the image's settings are not changed
    for changes, code, start in (
        ([_set("retry.backoff.ms", "1"), _delete("retry.backoff.ms")], ErrorCode.INVALID_REQUEST, "retry.backoff.ms: altered more than once"),
        ([_set("retry.backoff.ms", None)], ErrorCode.INVALID_CONFIG, "retry.backoff.ms: a value is required"),
        ([_delete("bootstrap.servers")], ErrorCode.INVALID_CONFIG, "bootstrap.servers: cannot be deleted"),
        ([SimpleNamespace(name="x", operation=9, value=None)], ErrorCode.INVALID_REQUEST, "x: unknown operation 9"),
        ([_set("retry.backoff.ms", "0")], ErrorCode.INVALID_CONFIG, "retry.backoff.ms: must be positive"),
        ([_set("ssl.truststore.locaton", "x")], ErrorCode.INVALID_CONFIG, "ssl.truststore.locaton: not a cluster link setting"),
    ):
        with pytest.raises(LinkSettingsRefused) as refused:
            altered_link_configs(current, changes)
        assert refused.value.error_code == code and refused.value.message.startswith(start), refused.value.message


def test_link_settings_error_names_the_key_first(tmp_path):
    missing = tmp_path / "missing.pem"
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("not a certificate\n")
    for configs, message in (
        ({"security.protocol": "SSL", "ssl.truststore.location": str(missing)}, f"ssl.truststore.location: no such file {missing}"),
        ({"security.protocol": "SSL", "ssl.truststore.location": str(not_pem)}, "ssl.truststore.location: no PEM certificates in it"),
        ({"security.protocol": "SSL", "ssl.keystore.location": str(missing)}, f"ssl.keystore.location: no such file {missing}"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "sasl.jaas.config: required"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI", "sasl.jaas.config": PLAIN_JAAS}, "sasl.mechanism: GSSAPI"),
    ):
        found = link_settings_error("east", {"bootstrap.servers": "a:1", **configs})
        assert found is not None and found.startswith(message), found
    assert link_settings_error("east", {"bootstrap.servers": "a:1", "security.protocol": "SASL_PLAINTEXT",
                                        "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": SCRAM_JAAS}) is None
    # PLAINTEXT reads none of the TLS and SASL settings, so none of them can make it unusable.
    assert link_settings_error("east", {"bootstrap.servers": "a:1", "ssl.truststore.location": str(missing)}) is None


# ----------------------------------------------------------------------------- against brokers


@pytest.fixture
def forwarding_broker(tmp_path):
    """A controller-only node and a broker that forwards link requests to it."""
    from tests.cluster.test_quorum_processes import start_together

    controller_port = free_port()
    common = {
        "cluster.id": "bGluay1zZXR0aW5ncy1jaGVjaw",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
    }
    nodes = [
        BrokerProcess(tmp_path / "c1", {**common, "node.id": "1", "process.roles": "controller",
                                        "listeners": f"CONTROLLER://127.0.0.1:{controller_port}"}),
        BrokerProcess(tmp_path / "b2", {**common, "node.id": "2", "process.roles": "broker",
                                        "listeners": "PLAINTEXT://127.0.0.1:0"}),
    ]
    for process in nodes:
        process.data_dir.mkdir()
    try:
        start_together(nodes)
        yield SimpleNamespace(bootstrap=nodes[1].bootstrap)
    finally:
        for process in reversed(nodes):
            process.stop()


def _write_properties(path: Path, settings: dict[str, str]) -> str:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return str(path)


def _listed(broker) -> str:
    return links(broker, "--list").stdout


def _configs(broker, name: str) -> dict:
    return json.loads(links(broker, "--describe", "--link", name, "--output", "json").stdout)["links"][0]["configs"]


def test_unusable_settings_are_refused_before_anything_is_stored(forwarding_broker, tmp_path):
    broker = forwarding_broker
    certs = make_certs(tmp_path / "certs")
    source = f"127.0.0.1:{free_port()}"  # a link is not connected when created: no source needs to run
    missing = tmp_path / "gone" / "ca.pem"
    bad = {
        "missing-truststore": ({"security.protocol": "SSL", "ssl.truststore.location": str(missing)},
                               f"ssl.truststore.location: no such file {missing}"),
        "truststore-not-pem": ({"security.protocol": "SSL", "ssl.truststore.location": str(certs.client_key)},
                               "ssl.truststore.location: no PEM certificates in it"),
        "missing-keystore": ({"security.protocol": "SSL", "ssl.truststore.location": str(certs.ca),
                              "ssl.keystore.location": str(missing)}, f"ssl.keystore.location: no such file {missing}"),
        "plain-without-jaas": ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                "ssl.truststore.location": str(certs.ca)}, "sasl.jaas.config: required"),
        "unsupported-mechanism": ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                                   "sasl.jaas.config": PLAIN_JAAS}, "sasl.mechanism: OAUTHBEARER cannot be used"),
        "jaas-module-mismatch": ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                                  "sasl.jaas.config": PLAIN_JAAS}, "sasl.jaas.config: SCRAM-SHA-256 takes"),
    }
    for name, (settings, message) in bad.items():
        for validate in ((), ("--validate-only",)):
            properties = _write_properties(tmp_path / f"{name}.properties", {"bootstrap.servers": source, **settings})
            refused = links(broker, "--create", "--link", name, "--config-file", properties, *validate, check=False)
            assert refused.returncode == 1, (name, refused.stdout)
            assert f"link {name}: INVALID_CONFIG" in refused.stderr and message in refused.stderr, (name, refused.stderr)
            assert "s3cret" not in refused.stderr
    assert "Link name" not in _listed(broker)

    # The controller's own refusals come back unchanged, ahead of the settings check.
    typo = links(broker, "--create", "--link", "typo", "--config",
                 f"bootstrap.servers={source},security.protocol=SSL,ssl.truststore.location={missing},ssl.trustore.type=PEM",
                 check=False)
    assert typo.returncode == 1 and "ssl.trustore.type: not a cluster link setting" in typo.stderr

    # Usable SSL and SASL_SSL settings are accepted, and stored as given.
    ssl_link = _write_properties(tmp_path / "ssl.properties", {
        "bootstrap.servers": source, "security.protocol": "SSL", "ssl.truststore.location": str(certs.ca),
        "ssl.keystore.location": str(certs.client_keystore),
    })
    assert "creation successfully completed" in links(broker, "--create", "--link", "tls", "--config-file", ssl_link).stdout
    sasl_link = _write_properties(tmp_path / "sasl.properties", {
        "bootstrap.servers": source, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": SCRAM_JAAS, "ssl.truststore.location": str(certs.ca),
    })
    validated = links(broker, "--create", "--link", "sasl", "--config-file", sasl_link, "--validate-only")
    assert "validation successfully completed" in validated.stdout and "'sasl'" not in _listed(broker)
    links(broker, "--create", "--link", "sasl", "--config-file", sasl_link)
    listed = _listed(broker)
    assert "Link name: 'tls'" in listed and "Link name: 'sasl'" in listed
    assert _configs(broker, "tls")["ssl.truststore.location"]["value"] == str(certs.ca)

    # An alteration that would leave the link unusable is refused; the link keeps its settings.
    before = _configs(broker, "tls")
    for args, message in (
        (("--add-config", f"ssl.truststore.location={missing}"), f"ssl.truststore.location: no such file {missing}"),
        (("--add-config", "security.protocol=SASL_SSL"), "sasl.mechanism: GSSAPI cannot be used"),
        (("--add-config", "security.protocol=SASL_SSL,sasl.mechanism=PLAIN"), "sasl.jaas.config: required"),
    ):
        refused = links(broker, "--alter", "--link", "tls", *args, check=False)
        assert refused.returncode == 1 and "INVALID_CONFIG" in refused.stderr and message in refused.stderr, refused.stderr
    refused = links(broker, "--alter", "--link", "sasl", "--delete-config", "sasl.jaas.config", check=False)
    assert refused.returncode == 1 and "sasl.jaas.config: required" in refused.stderr, refused.stderr
    assert _configs(broker, "tls") == before
    assert _configs(broker, "sasl")["sasl.jaas.config"] == {"value": None, "sensitive": True}

    # validate_only alterations are checked the same way (the tool's --alter has no such flag: a raw request).
    host, port = broker.bootstrap.rsplit(":", 1)
    connection = KafkaConnection(host, int(port), 10)
    try:
        response = connection.call("AlterClusterLinks", 0, validate_only=True, links=[
            _AL.AlterableLink(link_name="tls", configs=[
                _AL.AlterableLinkConfig(name="ssl.keystore.location", operation=LINK_CONFIG_SET, value=str(missing))
            ]),
            _AL.AlterableLink(link_name="tls", configs=[
                _AL.AlterableLinkConfig(name="retry.backoff.ms", operation=LINK_CONFIG_SET, value="1000")
            ]),
        ])
    finally:
        connection.close()
    assert [(r.link_name, r.error_code) for r in response.results] == [("tls", ErrorCode.INVALID_CONFIG), ("tls", ErrorCode.NONE)]
    assert response.results[0].error_message == f"ssl.keystore.location: no such file {missing}"
    assert _configs(broker, "tls") == before

    # An alteration that leaves usable settings still goes through.
    links(broker, "--alter", "--link", "tls", "--add-config", "retry.backoff.ms=1000", "--delete-config", "ssl.keystore.location")
    after = _configs(broker, "tls")
    assert after["retry.backoff.ms"]["value"] == "1000" and "ssl.keystore.location" not in after


def test_rest_link_creation_is_checked_the_same_way(tmp_path):
    (tmp_path / "b").mkdir()
    broker = BrokerProcess(tmp_path / "b", {"rest.listener": "http://127.0.0.1:0"})
    try:
        broker.start()
        rest = Rest(rest_port(broker))
        base = f"/v3/clusters/{rest.cluster_id()}"
        missing = tmp_path / "missing.pem"
        configs = [{"name": "bootstrap.servers", "value": f"127.0.0.1:{free_port()}"},
                   {"name": "security.protocol", "value": "SSL"}, {"name": "ssl.truststore.location", "value": str(missing)}]
        for query in ("", "&validate_only=true"):
            status, body, raw = rest.request("POST", base + "/links?link_name=east" + query, {"configs": configs})
            assert status == 400 and f"ssl.truststore.location: no such file {missing}" in body["message"], raw
        assert rest.get(base + "/links")[1]["data"] == []
        assert "Link name" not in links(broker, "--list").stdout
    finally:
        broker.stop()
