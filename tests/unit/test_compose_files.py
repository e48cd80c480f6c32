"""docker/compose.yaml, docker/compose.combined.yaml and docker/compose.five.yaml: valid against the
Compose Specification's JSON schema (as vendored by check-jsonschema), and
each service's environment, read through the image's entrypoint rules, is a
pybroker config that starts the topology the file describes. The console and
the REST proxy are published on the host's 127.0.0.1 only, the console
read-only; every node keeps the image's HEALTHCHECK. Where a Compose
implementation (`docker compose` or `docker-compose`) is installed, its
`config` (no engine needed) accepts the files; where buildx and an engine
answer, `docker build --check` accepts the Dockerfile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker import container
from broker.config import load_config

PROJECT_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILES = ["docker/compose.yaml", "docker/compose.combined.yaml", "docker/compose.five.yaml"]
# Each file's (controllers, brokers): five combined nodes make a five-voter quorum.
NODE_COUNTS = {"docker/compose.yaml": (3, 3), "docker/compose.combined.yaml": (3, 3), "docker/compose.five.yaml": (5, 5)}


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
    assert (len(controllers), len(brokers)) == NODE_COUNTS[name]
    for service_name, config in configs.items():
        # Every node names the same voters, each reachable at its hostname.
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
    assert len(set(published)) == len(brokers)


def published(service: dict) -> dict[int, str]:
    """Container port -> the host address it is published on ("" for every interface)."""
    out = {}
    for mapping in service.get("ports", []):
        if isinstance(mapping, dict):  # Compose's long syntax, as `compose config` prints it
            out[int(mapping["target"])] = str(mapping.get("host_ip", ""))
            continue
        parts = str(mapping).split("/")[0].rsplit(":", 2)
        out[int(parts[-1])] = parts[0] if len(parts) == 3 else ""
    return out


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_console_and_rest_are_published_on_loopback_and_the_console_is_read_only(name, tmp_path):
    services = load_yaml(PROJECT_ROOT / name)["services"]
    seen = 0
    for service_name, service in services.items():
        config = service_config(service, tmp_path)
        http = [config[key] for key in ("console.listener", "rest.listener") if config[key]]
        if config["console.listener"]:
            # Nobody logs in to the console: it only shows, unless the file is changed.
            assert config["console.read.only"] is True, service_name
        for url in http:
            port = url.port
            if port in published(service):
                assert published(service)[port] == "127.0.0.1", (service_name, port)
                seen += 1
    assert seen == 2  # the first broker's console and REST proxy
    text = (PROJECT_ROOT / name).read_text()
    assert 'KAFKA_CONSOLE_READ_ONLY to "false"' in text and '"8080:8080"' in text  # how to open them, said


def test_monitoring_ports_are_published_on_loopback():
    services = load_yaml(PROJECT_ROOT / "docker/compose.monitoring.yaml")["services"]
    assert {n: published(s) for n, s in services.items()} == {"prometheus": {9090: "127.0.0.1"}, "grafana": {3000: "127.0.0.1"}}


def image_healthcheck() -> list[str]:
    """The exec-form CMD of the Dockerfile's HEALTHCHECK."""
    text = (PROJECT_ROOT / "docker" / "Dockerfile").read_text().replace("\\\n", " ")
    line = next(l for l in text.splitlines() if l.startswith("HEALTHCHECK "))
    return json.loads(line.split(" CMD ", 1)[1])


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_every_node_keeps_the_images_healthcheck(name):
    # The image's check finds each node's own listener: no service overrides or disables it.
    assert image_healthcheck() == ["python", "-m", "broker.container", "--healthcheck"]
    for service_name, service in load_yaml(PROJECT_ROOT / name)["services"].items():
        assert "healthcheck" not in service, service_name


def compose_command() -> list[str]:
    """`docker compose` (the plugin) or `docker-compose`, whichever answers; skips otherwise."""
    import shutil
    import subprocess

    reasons = []
    for command in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(command[0]) is None:
            reasons.append(f"no {command[0]} command")
            continue
        try:
            done = subprocess.run([*command, "version"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            reasons.append(f"{' '.join(command)} version: {exc}")
            continue
        if done.returncode == 0:
            return command
        reasons.append(f"{' '.join(command)}: {(done.stderr or done.stdout).strip()[:120]}")
    pytest.skip("no Compose implementation to validate with (" + "; ".join(reasons) + ")")


@pytest.mark.parametrize(
    "files",
    [
        ["docker/compose.yaml"],
        ["docker/compose.combined.yaml"],
        ["docker/compose.five.yaml"],
        ["docker/compose.yaml", "docker/compose.monitoring.yaml"],
    ],
)
def test_compose_config_accepts_the_files(files):
    """Compose's own parser and validation (`config` needs no engine): what the
    files say is what Compose makes of them."""
    import subprocess

    command = compose_command()
    done = subprocess.run(
        [*command, *[a for f in files for a in ("-f", f)], "config"], cwd=PROJECT_ROOT,
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rendered = load_yaml_text(done.stdout)
    broker = rendered["services"]["broker-4" if "broker-4" in rendered["services"] else "node-1"]
    assert published(broker)[8080] == published(broker)[8082] == "127.0.0.1", broker["ports"]


def load_yaml_text(text: str):
    yaml = pytest.importorskip("ruamel.yaml", reason="ruamel.yaml comes with check-jsonschema: pip install -e '.[test]'")
    return yaml.YAML(typ="safe", pure=True).load(text)


def test_docker_build_check_accepts_the_dockerfile():
    """BuildKit's Dockerfile checks (`docker build --check`), where buildx and an engine answer."""
    import shutil
    import subprocess

    if shutil.which("docker") is None:
        pytest.skip("no docker command")
    probe = subprocess.run(["docker", "buildx", "version"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"docker build --check needs buildx: {(probe.stderr or probe.stdout).strip()[:120]}")
    engine = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=60)
    if engine.returncode != 0:
        pytest.skip(f"docker build --check needs an engine: {(engine.stderr or engine.stdout).strip()[:160]}")
    done = subprocess.run(
        ["docker", "build", "--check", "-f", "docker/Dockerfile", "."], cwd=PROJECT_ROOT,
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
