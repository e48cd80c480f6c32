"""docker/compose.yaml and docker/compose.combined.yaml: valid against the
Compose Specification's JSON schema (as vendored by check-jsonschema), and
each service's environment, read through the image's entrypoint rules, is a
pybroker config that starts the topology the file describes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker import container
from broker.config import load_config

PROJECT_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILES = ["docker/compose.yaml", "docker/compose.combined.yaml"]


def load_yaml(path: Path):
    yaml = pytest.importorskip("ruamel.yaml", reason="ruamel.yaml comes with check-jsonschema: pip install -e '.[test]'")
    return yaml.YAML(typ="safe", pure=True).load(path.read_text())


def compose_schema() -> dict:
    pytest.importorskip("check_jsonschema", reason="the Compose schema comes with check-jsonschema: pip install -e '.[test]'")
    from importlib.resources import files

    return json.loads(files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text())


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_file_is_valid_against_the_compose_specification(name):
    import jsonschema

    document = load_yaml(PROJECT_ROOT / name)
    schema = compose_schema()
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(document), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors)


def service_config(service: dict, tmp_path: Path):
    """The pybroker config the image's entrypoint makes of a service's environment."""
    environ = {key: str(value) for key, value in service["environment"].items()}
    environ["KAFKA_LOG_DIRS"] = str(tmp_path / service["hostname"])  # the volume, here
    properties, _ = container.merged_properties(environ, None)
    return load_config(properties)


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_every_service_is_a_node_of_one_rf3_cluster(name, tmp_path):
    services = load_yaml(PROJECT_ROOT / name)["services"]
    configs = {n: service_config(s, tmp_path) for n, s in services.items()}
    node_ids = sorted(c["node.id"] for c in configs.values())
    assert len(node_ids) == len(set(node_ids)), node_ids
    controllers = {c["node.id"]: c for c in configs.values() if "controller" in c["process.roles"]}
    brokers = {n: c for n, c in configs.items() if "broker" in c["process.roles"]}
    assert len(controllers) == 3 and len(brokers) == 3
    for service_name, config in configs.items():
        # Every node names the same three voters, each reachable at its hostname.
        assert sorted(config.quorum_voters) == sorted(controllers), service_name
        for node_id, (host, port) in config.quorum_voters.items():
            service = next(s for s in services.values() if str(s["environment"]["KAFKA_NODE_ID"]) == str(node_id))
            assert (host, port) == (service["hostname"], 9093)
        assert config["cluster.id"] or services[service_name]["environment"]["CLUSTER_ID"]
    for config in controllers.values():
        # The active controller fills in the defaults of new topics.
        assert config["default.replication.factor"] == 3, config["node.id"]
    published = []
    for service_name, config in brokers.items():
        service = services[service_name]
        assert (config["default.replication.factor"], config["min.insync.replicas"], config["offsets.topic.replication.factor"]) == (3, 2, 3)
        advertised = {listener.name: (listener.host, listener.port) for listener in config.advertised_listeners}
        # Containers reach a broker by its hostname, the host by localhost and its published port.
        assert advertised["INTERNAL"] == (service["hostname"], 19092)
        host_port = advertised["EXTERNAL"][1]
        assert advertised["EXTERNAL"] == ("localhost", host_port)
        assert f"{host_port}:{host_port}" in service["ports"]
        assert config.inter_broker_listener_name == "INTERNAL"
        published.append(host_port)
    assert len(set(published)) == 3
