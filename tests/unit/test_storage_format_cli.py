"""``pybroker storage format|info|random-uuid`` and the checks behind them (storage.meta_properties)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from broker.cli import main
from storage.meta_properties import (
    META_PROPERTIES,
    MetaPropertiesError,
    check_cluster_id,
    ensure_meta_properties,
    read_meta_properties,
    require_formatted,
)

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"  # the id in Kafka's quickstart
VOTERS = "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095"


def write_config(tmp_path: Path, **values: str) -> Path:
    settings = {
        "node.id": "1",
        "log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}",
        "metadata.log.dir": str(tmp_path / "meta"),
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": VOTERS,
    }
    settings.update({key.replace("_", "."): value for key, value in values.items()})
    path = tmp_path / "server.properties"
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items() if value is not None))
    return path


def storage(*args: str) -> int:
    return main(["storage", *args])


def test_format_writes_meta_properties_into_every_log_dir_and_the_metadata_dir(tmp_path, capsys):
    config = write_config(tmp_path)
    assert storage("format", "--config", str(config), "--cluster-id", CLUSTER_ID) == 0
    out = capsys.readouterr().out
    directory_ids = set()
    for name in ("a", "b", "meta"):
        values = read_meta_properties(tmp_path / name / META_PROPERTIES)
        assert (values["cluster.id"], values["node.id"], values["version"]) == (CLUSTER_ID, "1", "1")
        check_cluster_id(values["directory.id"])
        directory_ids.add(values["directory.id"])
        assert f"Formatting {tmp_path / name} with cluster.id {CLUSTER_ID}" in out
    assert len(directory_ids) == 3  # each directory has its own id
    # A formatted directory is what a started node accepts as its own.
    require_formatted([tmp_path / "a", tmp_path / "b", tmp_path / "meta"])
    assert ensure_meta_properties([tmp_path / "a", tmp_path / "meta"], 1, None) == CLUSTER_ID


def test_the_metadata_dir_defaults_to_the_first_log_dir(tmp_path):
    config = write_config(tmp_path, **{"metadata.log.dir": None})
    assert storage("format", "-c", str(config), "-t", CLUSTER_ID) == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["a", "b"]


def test_format_refuses_formatted_storage_and_changes_nothing(tmp_path, capsys):
    config = write_config(tmp_path)
    assert storage("format", "-c", str(config), "-t", CLUSTER_ID) == 0
    before = (tmp_path / "a" / META_PROPERTIES).read_bytes()
    (tmp_path / "b" / META_PROPERTIES).unlink()
    capsys.readouterr()
    other_id = "AAAAAAAAAAAAAAAAAAAAAQ"
    assert storage("format", "-c", str(config), "-t", other_id) == 1
    err = capsys.readouterr().err
    assert "already formatted" in err and "--ignore-formatted" in err
    assert (tmp_path / "a" / META_PROPERTIES).read_bytes() == before
    assert not (tmp_path / "b" / META_PROPERTIES).exists()


def test_ignore_formatted_formats_only_the_rest(tmp_path, capsys):
    config = write_config(tmp_path)
    assert storage("format", "-c", str(config), "-t", CLUSTER_ID) == 0
    before = (tmp_path / "a" / META_PROPERTIES).read_bytes()
    (tmp_path / "b" / META_PROPERTIES).unlink()
    capsys.readouterr()
    assert storage("format", "-c", str(config), "-t", CLUSTER_ID, "--ignore-formatted") == 0
    out = capsys.readouterr().out
    assert f"{tmp_path / 'a'} is already formatted" in out
    assert f"Formatting {tmp_path / 'b'}" in out
    assert (tmp_path / "a" / META_PROPERTIES).read_bytes() == before
    assert read_meta_properties(tmp_path / "b" / META_PROPERTIES)["cluster.id"] == CLUSTER_ID


@pytest.mark.parametrize(
    "cluster_id",
    [
        "short",
        "MkU3OEVBNTcwNTJENDM2Qg==",  # padded
        "MkU3OEVBNTcwNTJENDM2Q+",  # not the URL-safe alphabet
        "MkU3OEVBNTcwNTJENDM2Qh",  # low bits set: not the encoding of 16 bytes
        "AAAAAAAAAAAAAAAAAAAAAA",  # the reserved all-zero id
        "0123456789abcdef0123456789abcdef",  # hex, not base64
    ],
)
def test_format_checks_the_cluster_id_like_kafka(tmp_path, capsys, cluster_id):
    config = write_config(tmp_path)
    assert storage("format", "-c", str(config), "-t", cluster_id) == 1
    assert "cluster id" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()


def test_format_refuses_a_cluster_id_other_than_the_configs(tmp_path, capsys):
    config = write_config(tmp_path, **{"cluster.id": "AAAAAAAAAAAAAAAAAAAAAQ"})
    assert storage("format", "-c", str(config), "-t", CLUSTER_ID) == 1
    assert "cluster.id" in capsys.readouterr().err


def test_format_refuses_a_config_that_does_not_load(tmp_path, capsys):
    config = write_config(tmp_path, **{"node.id": "9"})
    assert storage("format", "-c", str(config), "-t", CLUSTER_ID) == 1
    assert "controller.quorum.voters" in capsys.readouterr().err


def test_standalone_needs_this_controller_to_be_the_only_voter(tmp_path, capsys):
    config = write_config(tmp_path)
    assert storage("format", "-c", str(config), "-t", CLUSTER_ID, "--standalone") == 1
    assert "--standalone" in capsys.readouterr().err
    alone = write_config(tmp_path, **{"controller.quorum.voters": "1@127.0.0.1:9093"})
    assert storage("format", "-c", str(alone), "-t", CLUSTER_ID, "--standalone") == 0


def test_random_uuid_prints_a_valid_cluster_id(capsys):
    ids = set()
    for _ in range(20):
        assert storage("random-uuid") == 0
        text = capsys.readouterr().out.strip()
        assert len(text) == 22 and not text.startswith("-")
        assert check_cluster_id(text) == text
        assert len(base64.urlsafe_b64decode(text + "==")) == 16
        ids.add(text)
    assert len(ids) == 20


def test_info_prints_what_is_formatted(tmp_path, capsys):
    config = write_config(tmp_path)
    assert storage("info", "-c", str(config)) == 1
    out = capsys.readouterr().out
    assert f"{tmp_path / 'a'}: not formatted" in out and "Problems:" in out
    assert storage("format", "-c", str(config), "-t", CLUSTER_ID) == 0
    capsys.readouterr()
    assert storage("info", "-c", str(config)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    for name, line in zip(("a", "b", "meta"), lines):
        assert line.startswith(f"{tmp_path / name}: cluster.id={CLUSTER_ID}, directory.id=")
        assert line.endswith("node.id=1, version=1")


def test_info_reports_another_nodes_storage(tmp_path, capsys):
    config = write_config(tmp_path)
    assert storage("format", "-c", str(config), "-t", CLUSTER_ID) == 0
    capsys.readouterr()
    config = write_config(tmp_path, **{"node.id": "2"})
    assert storage("info", "-c", str(config)) == 1
    assert "belongs to node 1, not node.id=2" in capsys.readouterr().out


def test_require_formatted_names_the_command_to_run(tmp_path):
    with pytest.raises(MetaPropertiesError) as exc:
        require_formatted([tmp_path / "a"])
    assert "pybroker storage format" in str(exc.value) and str(tmp_path / "a") in str(exc.value)


def test_a_single_node_still_formats_itself(tmp_path):
    cluster_id = ensure_meta_properties([tmp_path / "only"], 1, None)
    check_cluster_id(cluster_id)
    assert read_meta_properties(tmp_path / "only" / META_PROPERTIES)["cluster.id"] == cluster_id


def test_feature_levels_go_into_the_bootstrap_file_and_out_of_range_ones_are_refused(tmp_path, capsys):
    from controller.features import GROUP_VERSION, SHARE_VERSION, with_bootstrap_features
    from controller.metadata.bootstrap import read_bootstrap_file

    config = write_config(tmp_path)
    # Outside the supported range, or a feature pybroker does not know: refused, nothing written.
    for bad in (f"{GROUP_VERSION}=9", f"{SHARE_VERSION}=2", "metadata.version=20", GROUP_VERSION, f"{GROUP_VERSION}=x"):
        assert storage("format", "-c", str(config), "-t", CLUSTER_ID, "--feature", bad) == 1, bad
        assert "--feature" in capsys.readouterr().err
        assert not (tmp_path / "meta").exists()
    assert storage("format", "-c", str(config), "-t", CLUSTER_ID, "--feature", f"{GROUP_VERSION}=0") == 0
    assert f"feature levels {GROUP_VERSION}=0" in capsys.readouterr().out
    records = read_bootstrap_file(tmp_path / "meta")
    assert [(r.name, r.feature_level) for _, r in records] == [(GROUP_VERSION, 0)]
    # The first batch then leaves group.version out (level 0) and keeps the other defaults.
    first = [r.name for _, r in with_bootstrap_features(records)]
    assert GROUP_VERSION not in first
