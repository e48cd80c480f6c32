"""The monitoring files of docker/ (no Docker here: they are parsed, not run):
compose.monitoring.yaml against the Compose schema, every node of the cluster
files serving metrics.listener, Prometheus scraping exactly those nodes, the
Grafana provisioning, and a dashboard whose queries name metrics the broker serves."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker import container
from broker.config import load_config
from protocol.consumer_offsets import OffsetAndMetadata
from tests.unit.test_metrics import FakeLog, fake_broker, metrics_of

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DOCKER = PROJECT_ROOT / "docker"
# Cluster file -> the Prometheus config meant for it.
CLUSTERS = {
    "compose.yaml": "prometheus.yml",
    "compose.combined.yaml": "prometheus.combined.yml",
    "compose.five.yaml": "prometheus.five.yml",
}


def load_yaml(path: Path):
    yaml = pytest.importorskip("ruamel.yaml", reason="ruamel.yaml comes with check-jsonschema: pip install -e '.[test]'")
    return yaml.YAML(typ="safe", pure=True).load(path.read_text())


def test_monitoring_compose_file_is_valid_against_the_compose_specification():
    pytest.importorskip("check_jsonschema", reason="the Compose schema comes with check-jsonschema")
    from importlib.resources import files

    import jsonschema

    schema = json.loads(files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text())
    document = load_yaml(DOCKER / "compose.monitoring.yaml")
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(document))
    assert not errors, [e.message for e in errors]
    services = document["services"]
    assert services["prometheus"]["image"].startswith("prom/prometheus:")
    assert services["grafana"]["image"].startswith("grafana/grafana")
    # The files it mounts exist (paths are relative to docker/, the cluster files' directory).
    for service in services.values():
        for volume in service.get("volumes", []):
            source = re.sub(r"\$\{PYBROKER_PROMETHEUS_CONFIG:-([^}]+)\}", r"\1", volume).split(":")[0]
            if source.startswith("./"):
                assert (DOCKER / source).exists(), source


@pytest.mark.parametrize("cluster, prometheus", sorted(CLUSTERS.items()))
def test_prometheus_scrapes_every_node_of_the_cluster_file(cluster, prometheus, tmp_path):
    services = load_yaml(DOCKER / cluster)["services"]
    expected = set()
    for service in services.values():
        environ = {key: str(value) for key, value in service["environment"].items()}
        environ["KAFKA_LOG_DIRS"] = str(tmp_path / service["hostname"])
        properties, _ = container.merged_properties(environ, None)
        listener = load_config(properties)["metrics.listener"]
        assert listener is not None, service["hostname"]
        expected.add(f"{service['hostname']}:{listener.port}")
    config = load_yaml(DOCKER / "prometheus" / prometheus)
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    targets = {target for group in job["static_configs"] for target in group["targets"]}
    assert targets == expected


def test_grafana_provisioning_points_at_prometheus_and_the_dashboards():
    datasources = load_yaml(DOCKER / "grafana/provisioning/datasources/prometheus.yml")["datasources"]
    assert [(d["uid"], d["type"], d["url"]) for d in datasources] == [("prometheus", "prometheus", "http://prometheus:9090")]
    (provider,) = load_yaml(DOCKER / "grafana/provisioning/dashboards/pybroker.yml")["providers"]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    assert "./grafana/dashboards:/var/lib/grafana/dashboards:ro" in load_yaml(DOCKER / "compose.monitoring.yaml")["services"]["grafana"]["volumes"]


def test_dashboard_queries_name_metrics_the_broker_serves():
    dashboard = json.loads((DOCKER / "grafana/dashboards/pybroker.json").read_text())
    # The sample names a scrape has (a fake broker's, see test_metrics.py), plus process_*.
    logs = {("a", 0): FakeLog(5, 5)}
    metrics = metrics_of(fake_broker(logs=logs, offsets={"g": {("a", 0): OffsetAndMetadata(1, -1, "", 0)}}))
    metrics.request_done(0, 9, 0.001)  # request families have samples once a request was answered
    served = {
        sample.name
        for family in text_string_to_metric_families(metrics.exposition(None)[0].decode())
        for sample in family.samples
    }
    titles = {panel["title"] for panel in dashboard["panels"]}
    for wanted in ("Bytes in / out (all topics)", "Requests per API", "p99 request time per API", "Under-replicated partitions",
                   "ISR shrinks / expands", "Consumer group lag", "Event loop lag p99"):
        assert wanted in titles
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "prometheus"
        for target in panel["targets"]:
            for metric in re.findall(r"\b((?:kafka|pybroker)_[a-z0-9_]+)", target["expr"]):
                assert metric in served, metric
