"""``pybroker schemas`` against a real broker serving the schema registry: every action,
its text and ``--output json``, Confluent's errors with their codes and exit codes, an
incompatible ``--check`` exiting 1 with the registry's reasons; and the registry's
Prometheus metrics (schemas, subjects, requests by method and status, latency)
scraped after registrations."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from tests.conftest import PROJECT_ROOT, wait_until
from tests.interop.test_metrics import METRICS_LINE, metrics_port, scrape, value
from tests.schemas._registry import REGISTRY_LINE, Registry, registry_port

USER_V1 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
USER_V2 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int", "default": 0}]}
# A new field without a default: a BACKWARD-incompatible change.
USER_BAD = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}, {"name": "email", "type": "string"}]}
ADDRESS = {"type": "record", "name": "Address", "namespace": "shop", "fields": [{"name": "city", "type": "string"}]}
CUSTOMER = {"type": "record", "name": "Customer", "namespace": "shop", "fields": [{"name": "home", "type": "shop.Address"}]}


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    from tests.conftest import BrokerProcess

    broker = BrokerProcess(
        tmp_path_factory.mktemp("schemas-cli"),
        {"schema.registry.listener": "http://127.0.0.1:0", "metrics.listener": "http://127.0.0.1:0"},
    ).start()
    try:
        assert wait_until(lambda: REGISTRY_LINE.search(broker.log_text()) and METRICS_LINE.search(broker.log_text()))
        registry = Registry(registry_port(broker))
        registry.broker = broker
        yield registry
    finally:
        broker.stop()


def schemas(registry, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", "schemas", "--registry-url", registry.url, *args],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60, check=False, input=stdin,
    )


def as_json(done: subprocess.CompletedProcess):
    assert (done.returncode, done.stderr) == (0, ""), done
    return json.loads(done.stdout)


def schema_file(tmp_path, schema: dict | str, name: str = "schema.avsc") -> str:
    path = tmp_path / f"{uuid.uuid4().hex[:6]}-{name}"
    path.write_text(schema if isinstance(schema, str) else json.dumps(schema))
    return str(path)


def subject() -> str:
    return f"cli-{uuid.uuid4().hex[:8]}-value"


def test_register_list_versions_describe(registry, tmp_path):
    s = subject()
    v1 = schema_file(tmp_path, USER_V1)
    done = schemas(registry, "--register", "--subject", s, "--schema-file", v1)
    assert done.returncode == 0, done.stderr
    first_id = registry.get(f"/subjects/{s}/versions/1")[1]["id"]
    assert done.stdout == f"Registered schema id {first_id} as version 1 of subject {s}.\n"
    # The same schema again: the same id and version, as the registry answers.
    assert as_json(schemas(registry, "--register", "--subject", s, "--schema-file", v1, "--output", "json")) == {
        "subject": s, "version": 1, "id": first_id,
    }
    # From stdin.
    second = as_json(schemas(registry, "--register", "--subject", s, "--schema-file", "-", "--output", "json", stdin=json.dumps(USER_V2)))
    assert second["version"] == 2 and second["id"] > first_id

    listed = schemas(registry, "--list")
    assert listed.returncode == 0 and s in listed.stdout.splitlines()
    assert s in as_json(schemas(registry, "--list", "--output", "json"))["subjects"]

    assert schemas(registry, "--versions", "--subject", s).stdout == "1\n2\n"
    assert as_json(schemas(registry, "--versions", "--subject", s, "--output", "json")) == {"subject": s, "versions": [1, 2]}

    described = schemas(registry, "--describe", "--subject", s)
    assert described.returncode == 0, described.stderr
    assert described.stdout == f"Subject: {s}\tVersion: 2\tId: {second['id']}\tType: AVRO\n{json.dumps(USER_V2)}\n"
    assert as_json(schemas(registry, "--describe", "--subject", s, "--version", "1", "--output", "json")) == {
        "subject": s, "version": 1, "id": first_id, "schemaType": "AVRO", "references": [], "schema": json.dumps(USER_V1),
    }


def test_references_types_and_normalize(registry, tmp_path):
    address, customer = subject(), subject()
    schemas(registry, "--register", "--subject", address, "--schema-file", schema_file(tmp_path, ADDRESS))
    done = schemas(registry, "--register", "--subject", customer, "--schema-file", schema_file(tmp_path, CUSTOMER),
                   "--reference", f"shop.Address={address}:1", "--output", "json")
    registered = as_json(done)
    described = as_json(schemas(registry, "--describe", "--subject", customer, "--output", "json"))
    assert described["references"] == [{"name": "shop.Address", "subject": address, "version": 1}]
    assert described["id"] == registered["id"]
    text = schemas(registry, "--describe", "--subject", customer).stdout
    assert f"\tReference: shop.Address\tSubject: {address}\tVersion: 1\n" in text

    json_subject = subject()
    json_schema = {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}}
    done = schemas(registry, "--register", "--subject", json_subject, "--schema-type", "json", "--normalize",
                   "--schema-file", schema_file(tmp_path, json_schema, "schema.json"), "--output", "json")
    assert as_json(done)["version"] == 1
    assert as_json(schemas(registry, "--describe", "--subject", json_subject, "--output", "json"))["schemaType"] == "JSON"

    proto_subject = subject()
    proto = 'syntax = "proto3";\npackage shop;\nmessage Order { string id = 1; int64 cents = 2; }\n'
    done = schemas(registry, "--register", "--subject", proto_subject, "--schema-type", "PROTOBUF",
                   "--schema-file", schema_file(tmp_path, proto, "order.proto"))
    assert done.returncode == 0, done.stderr
    assert as_json(schemas(registry, "--describe", "--subject", proto_subject, "--output", "json"))["schemaType"] == "PROTOBUF"


def test_check_compatible_and_incompatible(registry, tmp_path):
    s = subject()
    schemas(registry, "--register", "--subject", s, "--schema-file", schema_file(tmp_path, USER_V1))
    good = schemas(registry, "--check", "--subject", s, "--schema-file", schema_file(tmp_path, USER_V2))
    assert (good.returncode, good.stdout, good.stderr) == (
        0, f"The schema is compatible with subject {s} (the versions its compatibility level checks).\n", "",
    )
    bad_file = schema_file(tmp_path, USER_BAD)
    bad = schemas(registry, "--check", "--subject", s, "--schema-file", bad_file, "--version", "latest", "--verbose")
    assert bad.returncode == 1, bad
    lines = bad.stdout.splitlines()
    assert lines[0] == f"The schema is NOT compatible with subject {s} (version latest)."
    # The registry's reasons, each on its own line: the field without a default is named.
    reasons = lines[1:]
    assert reasons and all(line.startswith("\t") for line in reasons) and any("email" in line for line in reasons), lines
    checked = json.loads(schemas(registry, "--check", "--subject", s, "--schema-file", bad_file, "--verbose", "--output", "json").stdout)
    assert checked["is_compatible"] is False and checked["subject"] == s and any("email" in m for m in checked["messages"])
    quiet = schemas(registry, "--check", "--subject", s, "--schema-file", bad_file)
    assert (quiet.returncode, len(quiet.stdout.splitlines())) == (1, 1)
    # And registering it is refused with Confluent's 409.
    refused = schemas(registry, "--register", "--subject", s, "--schema-file", bad_file)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.rstrip().endswith("(error code 409)"), refused.stderr


def test_delete_soft_then_permanent(registry, tmp_path):
    s = subject()
    schemas(registry, "--register", "--subject", s, "--schema-file", schema_file(tmp_path, USER_V1))
    schemas(registry, "--register", "--subject", s, "--schema-file", schema_file(tmp_path, USER_V2))
    one = schemas(registry, "--delete", "--subject", s, "--version", "1")
    assert (one.returncode, one.stdout) == (0, f"Deleted (soft) version(s) 1 of subject {s}.\n"), one.stderr
    assert schemas(registry, "--versions", "--subject", s).stdout == "2\n"
    assert schemas(registry, "--versions", "--subject", s, "--deleted").stdout == "1\n2\n"
    assert as_json(schemas(registry, "--delete", "--subject", s, "--output", "json")) == {"subject": s, "versions": [2], "permanent": False}
    assert s not in schemas(registry, "--list").stdout.splitlines()
    assert s in schemas(registry, "--list", "--deleted").stdout.splitlines()
    gone = as_json(schemas(registry, "--delete", "--subject", s, "--permanent", "--output", "json"))
    assert gone == {"subject": s, "versions": [1, 2], "permanent": True}
    assert s not in schemas(registry, "--list", "--deleted").stdout.splitlines()


def test_config_and_mode(registry):
    s = subject()
    described = schemas(registry, "--config")
    assert (described.returncode, described.stdout) == (0, "The compatibility of the registry (global) is BACKWARD.\n")
    inherited = schemas(registry, "--config", "--subject", s)
    assert inherited.stdout == f"The compatibility of subject {s} is BACKWARD (the global setting: the subject has none of its own).\n"
    changed = schemas(registry, "--config", "--subject", s, "--set-compatibility", "full_transitive")
    assert (changed.returncode, changed.stdout) == (0, f"Set the compatibility of subject {s} to FULL_TRANSITIVE.\n"), changed.stderr
    assert as_json(schemas(registry, "--config", "--subject", s, "--output", "json")) == {
        "subject": s, "compatibility": "FULL_TRANSITIVE", "global": False,
    }
    bad = schemas(registry, "--config", "--subject", s, "--set-compatibility", "SIDEWAYS")
    assert bad.returncode == 1 and bad.stderr.startswith("pybroker schemas: Invalid compatibility level.")
    assert bad.stderr.rstrip().endswith("(error code 42203)")

    assert as_json(schemas(registry, "--mode", "--output", "json")) == {"subject": None, "mode": "READWRITE", "global": True}
    assert schemas(registry, "--mode", "--subject", s, "--set-mode", "READONLY").stdout == f"Set the mode of subject {s} to READONLY.\n"
    assert schemas(registry, "--mode", "--subject", s).stdout == f"The mode of subject {s} is READONLY.\n"
    wrong = schemas(registry, "--mode", "--set-mode", "SOMETIMES")
    assert wrong.returncode == 1 and wrong.stderr.rstrip().endswith("(error code 42204)"), wrong.stderr


def test_errors_say_confluents_message_and_code(registry, tmp_path):
    missing = schemas(registry, "--versions", "--subject", "no-such-subject-value")
    assert (missing.returncode, missing.stdout, missing.stderr) == (
        1, "", "pybroker schemas: Subject 'no-such-subject-value' not found. (error code 40401)\n",
    )
    s = subject()
    schemas(registry, "--register", "--subject", s, "--schema-file", schema_file(tmp_path, USER_V1))
    no_version = schemas(registry, "--describe", "--subject", s, "--version", "7")
    assert (no_version.returncode, no_version.stderr) == (1, "pybroker schemas: Version 7 not found. (error code 40402)\n")
    invalid = schemas(registry, "--register", "--subject", s, "--schema-file", schema_file(tmp_path, "{not avro"))
    assert invalid.returncode == 1 and invalid.stderr.rstrip().endswith("(error code 42201)"), invalid.stderr
    # Usage and connection problems: exit code 2, one line.
    usage = schemas(registry, "--describe")
    assert (usage.returncode, usage.stderr) == (2, "pybroker schemas: --describe needs --subject\n")
    misplaced = schemas(registry, "--list", "--permanent")
    assert (misplaced.returncode, misplaced.stderr) == (2, "pybroker schemas: --permanent goes with --delete\n")
    no_file = schemas(registry, "--check", "--subject", s, "--schema-file", str(tmp_path / "absent.avsc"))
    assert no_file.returncode == 2 and "absent.avsc: No such file or directory" in no_file.stderr
    bad_reference = schemas(registry, "--register", "--subject", s, "--schema-file", schema_file(tmp_path, USER_V1), "--reference", "x")
    assert (bad_reference.returncode, bad_reference.stderr) == (2, "pybroker schemas: --reference: expected name=subject:version, got 'x'\n")
    unreachable = subprocess.run(
        [sys.executable, "-m", "broker", "schemas", "--registry-url", "http://127.0.0.1:1", "--list"],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60, check=False,
    )
    assert unreachable.returncode == 2 and unreachable.stderr.startswith("pybroker schemas: cannot reach the schema registry at http://127.0.0.1:1")
    # --version alone is pybroker's version, as on every subcommand.
    version = schemas(registry, "--version")
    assert version.returncode == 0 and version.stdout.startswith("pybroker ")


def test_metrics_count_schemas_subjects_and_requests(registry, tmp_path):
    port = metrics_port(registry.broker)
    before = scrape(port)
    requests_before = value(before, "pybroker_schema_registry_requests_total", method="POST", status="200") or 0
    not_found_before = value(before, "pybroker_schema_registry_requests_total", method="GET", status="404") or 0
    made = [subject() for _ in range(3)]
    for s in made:
        assert registry.register(s, USER_V1)[0] == 200
    other = subject()
    assert registry.register(other, {"type": "enum", "name": "Colour", "symbols": ["RED"]})[0] == 200
    assert registry.get("/subjects/no-such-subject-value/versions")[0] == 404
    assert registry.get("/subjects")[0] == 200  # this broker's state caught up, as a read does
    after = scrape(port)
    state = registry.get("/schemas?deleted=true")[1]
    live_subjects = registry.get("/subjects")[1]
    assert value(after, "pybroker_schema_registry_schemas") == len({entry["id"] for entry in state})
    assert value(after, "pybroker_schema_registry_subjects") == len(live_subjects)
    assert set(made + [other]) <= set(live_subjects)
    assert value(after, "pybroker_schema_registry_requests_total", method="POST", status="200") == requests_before + 4
    assert value(after, "pybroker_schema_registry_requests_total", method="GET", status="404") == not_found_before + 1
    count = value(after, "pybroker_schema_registry_request_duration_seconds_count", method="POST")
    assert count is not None and count >= requests_before + 4
    assert value(after, "pybroker_schema_registry_request_duration_seconds_bucket", method="POST", le="+Inf") == count
    assert value(after, "pybroker_schema_registry_request_duration_seconds_sum", method="POST") > 0
