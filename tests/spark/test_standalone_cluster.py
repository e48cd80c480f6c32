"""topic_stats submitted with spark-submit to a real Spark standalone cluster (a master and one worker).

The executors run in the worker's JVM and Python processes, not in the driver,
so this checks what local mode cannot: that the pickled data source is
unpickled and reads the segment files in a Python worker of the cluster.
Also: the ``--py-files`` zip of ``spark_jobs.package_zip`` is enough, on its
own, to import the jobs (what a worker without pybroker installed gets).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import site
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT
from tests.interop._support import create_topic, unique_topic
from tests.spark._support import stopped_log_dir

WORKER_REGISTERED_TIMEOUT_S = 60
SUBMIT_TIMEOUT_S = 150
STOP_TIMEOUT_S = 10
PARTITIONS = 3
ROUNDS = 4
RECORDS_PER_ROUND = 30


def free_ports(count: int) -> list[int]:
    """Ports the kernel hands out for port 0 on 127.0.0.1, all held until all are chosen."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def spark_env(tmp_path: Path) -> dict[str, str]:
    import pyspark

    env = dict(os.environ)
    env.update(
        {
            "SPARK_HOME": str(Path(pyspark.__file__).resolve().parent),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_WORKER_DIR": str(tmp_path / "spark-work"),
            "SPARK_LOG_DIR": str(tmp_path / "spark-logs"),
            # Scratch space of the master, worker, executors and driver: the test's, not the system temp dir.
            "SPARK_LOCAL_DIRS": str(tmp_path / "spark-local"),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            # The master's REST submission server would take the fixed port 6066.
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        }
    )
    return env


def stop_process_group(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL, to the whole group: the JVM and the executors and Python workers it started."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            continue
        # The group leader is gone; its children may not be yet.
        if not wait_group_gone(process.pid, STOP_TIMEOUT_S):
            continue
        break


def wait_group_gone(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


# No proxy from the environment for 127.0.0.1.
LOCAL_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def alive_workers(webui_port: int) -> int:
    try:
        with LOCAL_HTTP.open(f"http://127.0.0.1:{webui_port}/json/", timeout=2) as response:
            return int(json.load(response).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


def log_tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


@pytest.fixture
def standalone_cluster(tmp_path):
    """``spark://127.0.0.1:PORT`` of a master with one registered worker (1 core, 1 GiB); both are
    stopped, with every process they started, at teardown."""
    if shutil.which("java") is None:
        pytest.skip("java is not on PATH (a Spark standalone cluster runs in JVMs)")
    env = spark_env(tmp_path)
    spark_class = Path(env["SPARK_HOME"]) / "bin" / "spark-class"
    master_port, master_webui_port, worker_webui_port = free_ports(3)
    master_url = f"spark://127.0.0.1:{master_port}"
    log_dir = Path(env["SPARK_LOG_DIR"])
    log_dir.mkdir(parents=True)
    Path(env["SPARK_WORKER_DIR"]).mkdir(parents=True)
    Path(env["SPARK_LOCAL_DIRS"]).mkdir(parents=True)
    commands = {
        "master": [
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(master_port),
            "--webui-port",
            str(master_webui_port),
        ],
        "worker": [
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--cores",
            "1",
            "--memory",
            "1g",
            "--webui-port",
            str(worker_webui_port),
            master_url,
        ],
    }
    processes: dict[str, subprocess.Popen] = {}
    try:
        for name, arguments in commands.items():
            with open(log_dir / f"{name}.out", "wb") as log:
                # A session of its own: teardown kills the group, not just the spark-class shell.
                processes[name] = subprocess.Popen(
                    [str(spark_class), *arguments],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    cwd=tmp_path,
                    start_new_session=True,
                )
        deadline = time.monotonic() + WORKER_REGISTERED_TIMEOUT_S
        while alive_workers(master_webui_port) < 1:
            exited = [name for name, process in processes.items() if process.poll() is not None]
            if exited or time.monotonic() > deadline:
                reason = f"{', '.join(exited)} exited" if exited else f"no worker after {WORKER_REGISTERED_TIMEOUT_S} s"
                pytest.fail(
                    f"Spark standalone cluster did not come up ({reason}):\n"
                    + "\n".join(f"--- {name}:\n{log_tail(log_dir / f'{name}.out')}" for name in commands)
                )
            time.sleep(0.5)
        yield master_url, env
    finally:
        for process in reversed(processes.values()):
            stop_process_group(process)


def produce_rounds(bootstrap: str, topic: str) -> Counter:
    """Records in several flushed rounds (several batches, so several segments per partition);
    returns the record count per partition."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    counts: Counter = Counter()
    for round_index in range(ROUNDS):
        for i in range(RECORDS_PER_ROUND):
            partition = (round_index + i) % PARTITIONS
            producer.produce(topic, key=b"k%d" % (i % 5), value=b"v" * (20 + i), partition=partition)
            counts[partition] += 1
        assert producer.flush(30) == 0
    return counts


@pytest.mark.slow
def test_topic_stats_spark_submit_on_standalone_cluster(standalone_cluster, broker_factory, tmp_path):
    import pyarrow.parquet as pq

    master_url, env = standalone_cluster
    broker = broker_factory({"log.segment.bytes": "1024"})
    topic = unique_topic("cluster-stats")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    expected = produce_rounds(broker.bootstrap, topic)
    log_dir = stopped_log_dir(broker)
    assert any(len(list((log_dir / f"{topic}-{p}").glob("*.log"))) > 1 for p in range(PARTITIONS))

    output = tmp_path / "stats"
    command = [
        str(Path(env["SPARK_HOME"]) / "bin" / "spark-submit"),
        "--master",
        master_url,
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        "spark.sql.shuffle.partitions=2",
        # Run as a file, as on a cluster's edge node: the job finds its packages next to itself.
        str(PROJECT_ROOT / "spark_jobs" / "topic_stats.py"),
        "--path",
        str(log_dir),
        "--topics",
        topic,
        "--output",
        str(output),
    ]
    submit_log = tmp_path / "spark-submit.out"
    with open(submit_log, "wb") as log:
        submit = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path, start_new_session=True
        )
        try:
            returncode = submit.wait(SUBMIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            stop_process_group(submit)
    assert returncode == 0, f"spark-submit returned {returncode}:\n{log_tail(submit_log, 6000)}"

    # The tasks ran on the cluster's worker, not in the driver.
    app_dirs = list(Path(env["SPARK_WORKER_DIR"]).glob("app-*"))
    assert len(app_dirs) == 1, app_dirs
    table = pq.read_table(output / "per_partition").to_pydict()
    assert set(table["topic"]) == {topic}
    assert dict(zip(table["partition"], table["records"])) == dict(expected)
    assert dict(zip(table["partition"], table["last_offset"])) == {p: n - 1 for p, n in expected.items()}
    assert sum(pq.read_table(output / "per_hour").to_pydict()["records"]) == sum(expected.values())


def test_package_zip_alone_provides_the_jobs_packages(tmp_path):
    """What ``--py-files`` gives a worker without pybroker installed: the zip, and nothing else of the
    project, must import the data source and the jobs (``protocol.registry`` finds its messages in it)."""
    from spark_jobs.package_zip import write_zip

    archive = tmp_path / "pybroker-spark.zip"
    assert write_zip(archive) > 0
    check = textwrap.dedent(
        """
        import sys
        archive = sys.argv[1]
        sys.path[:0] = sys.argv[1:]
        import spark_jobs.consumer_lag, spark_jobs.datasource, spark_jobs.topic_stats
        from protocol.registry import APIS_BY_KEY, DATA_MESSAGES
        from storage import checkpoint
        modules = (spark_jobs.consumer_lag, spark_jobs.datasource, spark_jobs.topic_stats, checkpoint)
        outside = [m.__name__ for m in modules if not m.__file__.startswith(archive)]
        assert not outside, outside
        print(len(APIS_BY_KEY), len(DATA_MESSAGES))
        """
    )
    # -S: no site module, so no .pth file installs the project's editable finder; the third-party
    # packages come from site-packages, put on sys.path by hand after the zip.
    result = subprocess.run(
        [sys.executable, "-S", "-c", check, str(archive), *site.getsitepackages()],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    from protocol.registry import APIS_BY_KEY, DATA_MESSAGES

    assert result.stdout.split() == [str(len(APIS_BY_KEY)), str(len(DATA_MESSAGES))]
