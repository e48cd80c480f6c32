"""The container entrypoint (broker/container.py): KAFKA_ variables to keys,
the base config, CLUSTER_ID and first-start formatting. Nothing is exec'd:
`main` gets a fake execvp, `prepare` returns the command."""

from __future__ import annotations

import sys

import pytest

from broker import container
from broker.config import load_config_file, parse_properties
from storage.meta_properties import new_cluster_id, read_meta_properties

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


@pytest.mark.parametrize(
    "name, key",
    [
        ("KAFKA_NODE_ID", "node.id"),
        ("KAFKA_CONTROLLER_QUORUM_VOTERS", "controller.quorum.voters"),
        ("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "listener.security.protocol.map"),
        ("KAFKA_LOG_DIRS", "log.dirs"),
        ("KAFKA_PROCESS_ROLES", "process.roles"),
        # Escapes: ___ is a dash, __ an underscore, and neither turns into a dot.
        ("KAFKA_LISTENER_NAME_INTERNAL_SSL_KEYSTORE___TYPE", "listener.name.internal.ssl.keystore-type"),
        ("KAFKA_FOO__BAR", "foo_bar"),
        ("KAFKA_A__B___C_D", "a_b-c.d"),
        ("KAFKA_X____Y", "x-.y"),
    ],
)
def test_env_key_mapping(name, key):
    assert container.env_key(name) == key


@pytest.mark.parametrize(
    "name",
    ["KAFKA_HEAP_OPTS", "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_GC_LOG_OPTS", "KAFKA_LOG4J_OPTS", "KAFKA_OPTS",
     "KAFKA_JMX_OPTS", "KAFKA_VERSION", "KAFKA_", "CLUSTER_ID", "PATH", "kafka_node_id", "MY_KAFKA_NODE_ID"],
)
def test_not_broker_keys(name):
    assert container.env_key(name) is None


def test_env_properties_skips_launcher_settings():
    environ = {"KAFKA_NODE_ID": "3", "KAFKA_HEAP_OPTS": "-Xmx1G", "KAFKA_OPTS": "-Dx=y", "HOME": "/root"}
    assert container.env_properties(environ) == {"node.id": "3"}
    assert container.ignored_variables(environ) == ["KAFKA_HEAP_OPTS", "KAFKA_OPTS"]


def test_variables_override_a_given_base_file(tmp_path):
    base = tmp_path / "base.properties"
    base.write_text("node.id=1\nnum.partitions=1\nlisteners=PLAINTEXT://127.0.0.1:9092\n")
    properties, image_base = container.merged_properties({"KAFKA_NUM_PARTITIONS": "6", "KAFKA_SOME_NEW_KEY": "x"}, base)
    assert not image_base
    # A user's base file is taken as it is: no image defaults mixed in.
    assert properties == {
        "node.id": "1", "num.partitions": "6", "listeners": "PLAINTEXT://127.0.0.1:9092", "some.new.key": "x"
    }


def test_image_defaults_without_variables(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/ here: the defaults alone
    properties, image_base = container.merged_properties({}, None)
    assert image_base
    assert properties == container.IMAGE_DEFAULTS


def test_without_variables_the_image_runs_its_single_node_config(monkeypatch):
    from tests.conftest import PROJECT_ROOT

    monkeypatch.chdir(PROJECT_ROOT)
    properties, image_base = container.merged_properties({}, None)
    assert image_base
    assert properties["process.roles"] == "broker,controller"
    assert properties["listeners"] == "PLAINTEXT://0.0.0.0:9092"
    assert properties["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert properties["log.dirs"] == "/var/lib/pybroker"


def test_with_variables_they_are_the_whole_config(monkeypatch):
    # As the apache/kafka image: no default file once a variable is set, so a
    # cluster node inherits no node.id, listener or replication factor.
    from tests.conftest import PROJECT_ROOT

    monkeypatch.chdir(PROJECT_ROOT)
    properties, image_base = container.merged_properties({"KAFKA_NUM_PARTITIONS": "3"}, None)
    assert not image_base
    assert properties == {"log.dirs": "/var/lib/pybroker", "num.partitions": "3"}
    properties, _ = container.merged_properties({"KAFKA_LOG_DIR": "/data"}, None)
    assert properties == {"log.dir": "/data"}


def test_rendered_file_reads_back(tmp_path):
    properties = {"a.b": "PLAINTEXT://h:1,CONTROLLER://h:2", "odd key": " lead\\ing\n", "c": ""}
    assert parse_properties(container.render_properties(properties)) == properties


def single_node_env(tmp_path, **extra) -> dict[str, str]:
    return {"KAFKA_LISTENERS": "PLAINTEXT://127.0.0.1:9092", "KAFKA_LOG_DIRS": str(tmp_path / "data"), **extra}


def quorum_env(tmp_path, **extra) -> dict[str, str]:
    return {
        "KAFKA_NODE_ID": "2",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "2@127.0.0.1:9093",
        "KAFKA_LOG_DIRS": f"{tmp_path / 'a'},{tmp_path / 'b'}",
        **extra,
    }


def test_prepare_writes_the_config_in_the_first_log_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lines = []
    command = container.prepare(quorum_env(tmp_path, CLUSTER_ID=CLUSTER_ID), say=lines.append)
    config_file = tmp_path / "a" / "server.properties"
    assert command == [sys.executable, "-m", "broker", "start", "--config", str(config_file)]
    config = load_config_file(config_file)
    assert config.node_id == 2 and not config.single_node_quorum
    for directory in ("a", "b"):
        meta = read_meta_properties(tmp_path / directory / "meta.properties")
        assert meta["cluster.id"] == CLUSTER_ID and meta["node.id"] == "2"
    assert sum("formatted" in line for line in lines) == 2


def test_second_start_does_not_format_again(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    container.prepare(quorum_env(tmp_path, CLUSTER_ID=CLUSTER_ID), say=lambda line: None)
    before = (tmp_path / "a" / "meta.properties").read_text()  # directory.id is random: a reformat changes it
    lines = []
    # Neither CLUSTER_ID nor its value is needed any more once formatted.
    container.prepare(quorum_env(tmp_path), say=lines.append)
    assert (tmp_path / "a" / "meta.properties").read_text() == before
    assert any("already formatted" in line for line in lines)


def test_an_added_log_dir_is_formatted_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = quorum_env(tmp_path, CLUSTER_ID=CLUSTER_ID, KAFKA_LOG_DIRS=str(tmp_path / "a"))
    container.prepare(env, config_file=tmp_path / "node.properties", say=lambda line: None)
    before = (tmp_path / "a" / "meta.properties").read_text()
    container.prepare(quorum_env(tmp_path, CLUSTER_ID=CLUSTER_ID), config_file=tmp_path / "node.properties",
                      say=lambda line: None)
    assert (tmp_path / "a" / "meta.properties").read_text() == before
    assert read_meta_properties(tmp_path / "b" / "meta.properties")["cluster.id"] == CLUSTER_ID


def test_multi_node_needs_cluster_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(container.ContainerError, match="CLUSTER_ID is not set"):
        container.prepare(quorum_env(tmp_path), say=lambda line: None)
    assert not (tmp_path / "a" / "meta.properties").exists()


def test_cluster_id_from_the_config_key_is_enough(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    container.prepare(quorum_env(tmp_path, KAFKA_CLUSTER_ID=CLUSTER_ID), say=lambda line: None)
    assert read_meta_properties(tmp_path / "a" / "meta.properties")["cluster.id"] == CLUSTER_ID
    other = new_cluster_id()
    with pytest.raises(container.ContainerError, match="differ"):
        container.prepare(quorum_env(tmp_path / "x", KAFKA_CLUSTER_ID=CLUSTER_ID, CLUSTER_ID=other), say=print)


def test_bad_cluster_id_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(container.ContainerError, match="random-uuid"):
        container.prepare(quorum_env(tmp_path, CLUSTER_ID="not-an-id"), say=lambda line: None)


def test_multi_node_from_the_image_base_needs_a_node_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = quorum_env(tmp_path, CLUSTER_ID=CLUSTER_ID, KAFKA_CONTROLLER_QUORUM_VOTERS="1@127.0.0.1:9093")
    del env["KAFKA_NODE_ID"]
    with pytest.raises(container.ContainerError, match="KAFKA_NODE_ID"):
        container.prepare(env, say=lambda line: None)


def test_single_node_without_cluster_id_is_left_to_the_broker(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lines = []
    container.prepare(single_node_env(tmp_path), say=lines.append)
    assert not (tmp_path / "data" / "meta.properties").exists()  # the broker formats it at start
    assert any("makes up a cluster id" in line for line in lines)


def test_single_node_with_cluster_id_is_formatted_with_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    container.prepare(single_node_env(tmp_path, CLUSTER_ID=CLUSTER_ID), say=lambda line: None)
    assert read_meta_properties(tmp_path / "data" / "meta.properties")["cluster.id"] == CLUSTER_ID


def test_main_execs_the_broker_with_the_written_config(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    calls = []
    env = quorum_env(tmp_path, CLUSTER_ID=CLUSTER_ID, PYBROKER_CONFIG_FILE=str(tmp_path / "node.properties"))
    assert container.main([], environ=env, execvp=lambda file, args: calls.append((file, args))) == 0
    assert calls == [(sys.executable, [sys.executable, "-m", "broker", "start", "--config", str(tmp_path / "node.properties")])]


def test_main_base_config_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = tmp_path / "base.properties"
    base.write_text(f"log.dirs={tmp_path / 'data'}\nnum.partitions=4\n")
    out = tmp_path / "out.properties"
    env = {"PYBROKER_BASE_CONFIG": str(base), "KAFKA_NUM_PARTITIONS": "7"}
    assert container.main(["--config-file", str(out)], environ=env, execvp=lambda *a: None) == 0
    assert parse_properties(out.read_text()) == {"log.dirs": str(tmp_path / "data"), "num.partitions": "7"}


def test_main_fails_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    calls = []
    assert container.main([], environ=quorum_env(tmp_path), execvp=lambda *a: calls.append(a)) == 1
    err = capsys.readouterr().err
    assert calls == []
    assert err.count("\n") == 1 and err.startswith("pybroker container: CLUSTER_ID is not set")


def test_main_reports_a_bad_config_without_a_traceback(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    env = single_node_env(tmp_path, KAFKA_PROCESS_ROLES="broker,wizard")
    assert container.main([], environ=env, execvp=lambda *a: None) == 1
    assert "wizard" in capsys.readouterr().err


def test_a_command_runs_instead_of_the_node(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    calls = []
    assert container.main(["pybroker", "storage", "random-uuid"], environ={}, execvp=lambda *a: calls.append(a)) == 0
    assert calls == [("pybroker", ["pybroker", "storage", "random-uuid"])]
    assert list(tmp_path.iterdir()) == []  # nothing prepared


def test_a_data_directory_the_user_cannot_write_is_one_line_and_exit_code_3(tmp_path, monkeypatch, capsys):
    # Root writes everywhere, so the refusal is made here by a fake; the
    # entrypoint test runs it for real as another user.
    import errno
    import os

    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    data.mkdir()

    def refused(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(data))

    monkeypatch.setattr(container.tempfile, "mkstemp", refused)
    calls = []
    assert container.main([], environ=single_node_env(tmp_path), execvp=lambda *a: calls.append(a)) == 3
    err = capsys.readouterr().err
    assert calls == [] and err.count("\n") == 1, err
    uid, gid = os.geteuid(), os.getegid()
    info = data.stat()
    assert err == (
        f"pybroker container: the data directory {data} is not writable by uid {uid} ({data} is owned by "
        f"{info.st_uid}:{info.st_gid}, mode {info.st_mode & 0o7777:o}): chown it (chown -R {uid}:{gid} on the "
        "host's directory) or run with --user as its owner (docker run --user UID:GID, or user: \"UID:GID\" in compose)\n"
    )


def test_a_file_in_place_of_the_data_directory_is_one_line_and_exit_code_3(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").write_text("not a directory")
    assert container.main([], environ=single_node_env(tmp_path), execvp=lambda *a: None) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is in the way (not a directory)" in err, err


def test_every_log_dir_is_checked_before_formatting(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "b").write_text("a file")
    env = quorum_env(tmp_path, CLUSTER_ID=CLUSTER_ID)
    assert container.main([], environ=env, execvp=lambda *a: None) == 3
    assert f"the data directory {tmp_path / 'b'} cannot be made" in capsys.readouterr().err
    assert not (tmp_path / "a" / "meta.properties").exists()  # nothing formatted half-way


def write_config(tmp_path, text: str):
    path = tmp_path / "server.properties"
    path.write_text(text + f"\nlog.dirs={tmp_path / 'data'}\n")
    return load_config_file(path, warn=lambda message: None)


@pytest.mark.parametrize(
    "text, expected",
    [
        # A wildcard bind is dialled on loopback; the first PLAINTEXT broker listener is taken.
        ("listeners=PLAINTEXT://:9092", ("127.0.0.1", 9092, "PLAINTEXT", True)),
        (
            "node.id=4\nprocess.roles=broker\ncontroller.listener.names=CONTROLLER\n"
            "controller.quorum.voters=1@c1:9093\nlisteners=INTERNAL://:19092,EXTERNAL://0.0.0.0:9094\n"
            "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT\n"
            "inter.broker.listener.name=INTERNAL",
            ("127.0.0.1", 19092, "PLAINTEXT", True),
        ),
        (
            "listeners=SECURE://127.0.0.1:9094,PLAIN://broker-1:9095\n"
            "listener.security.protocol.map=SECURE:SASL_SSL,PLAIN:PLAINTEXT\n"
            "inter.broker.listener.name=PLAIN\nsasl.enabled.mechanisms=SCRAM-SHA-512",
            ("broker-1", 9095, "PLAINTEXT", True),
        ),
        # A controller-only node is checked on its controller listener.
        (
            "node.id=1\nprocess.roles=controller\ncontroller.listener.names=CONTROLLER\n"
            "controller.quorum.voters=1@c1:9093\nlisteners=CONTROLLER://:9093",
            ("127.0.0.1", 9093, "PLAINTEXT", False),
        ),
    ],
)
def test_the_healthcheck_dials_the_nodes_own_listener(tmp_path, text, expected):
    assert container.healthcheck_listener(write_config(tmp_path, text)) == expected


def test_the_healthcheck_of_a_secured_listener_needs_client_properties(tmp_path):
    write_config(
        tmp_path,
        "listeners=SECURE://127.0.0.1:9094\nlistener.security.protocol.map=SECURE:SASL_PLAINTEXT\n"
        "inter.broker.listener.name=SECURE\nsasl.enabled.mechanisms=SCRAM-SHA-512",
    )
    with pytest.raises(container.ContainerError, match="port 9094 is SASL_PLAINTEXT: set PYBROKER_HEALTHCHECK_COMMAND_CONFIG"):
        container.healthcheck(tmp_path / "server.properties", timeout_s=1)


def test_the_healthcheck_before_the_entrypoint_ran_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert container.main(["--healthcheck"], environ=single_node_env(tmp_path)) == 1
    err = capsys.readouterr().err
    assert err == f"pybroker healthcheck: {tmp_path / 'data' / 'server.properties'} does not exist: the node has not been started by the entrypoint\n"
