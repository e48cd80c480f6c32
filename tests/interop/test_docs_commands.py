"""Every command of the README and of the user guide runs as printed.

Each shell block (```sh, ```shell, ```bash, ```console) and each ```python block
of README.md and of every docs/ page but the reports is run in order, in a
temporary directory of its own per page (a copy of ``configs/``, nothing
written into the checkout), by ``tests/interop/_docs_blocks.py``: ports moved
to free ones, ``pybroker start`` lines (consecutive ones together, as the
nodes of one cluster) and ``pybroker dev-cluster`` run in the background until
they say they serve and stopped with SIGINT (which must exit 0), the quick start's
broker started for a block that talks to 127.0.0.1:9092 when the page started
none. A block fails on a non-zero exit or a traceback on stderr; an unknown
``pybroker`` subcommand fails like any other error. New blocks on these pages
are picked up without a change here.

The blocks that are not run are listed below, each with the reason; an entry
that no longer matches a block fails, so the list stays true.
"""

from __future__ import annotations

import pytest

from tests.interop._docs_blocks import PROJECT_ROOT, RUNNABLE_LANGUAGES, Block, Workspace, page_blocks

# Measurements and designs, not walkthroughs: their commands are benchmark and
# fault runs of minutes to hours, each documented with its own figures.
REPORT_PAGES = {
    "docs/COMPATIBILITY.md", "docs/PERFORMANCE.md", "docs/RELIABILITY.md", "docs/ARCHITECTURE.md", "docs/SCALING.md",
}
PAGES = ["README.md"] + sorted(
    str(path.relative_to(PROJECT_ROOT)) for path in (PROJECT_ROOT / "docs").glob("*.md")
    if str(path.relative_to(PROJECT_ROOT)) not in REPORT_PAGES
)

INSTALLS = "installs packages into a new .venv: done by CI itself before this test runs"
DOCKER = "starts Docker: no engine in CI (tests/cluster/test_compose_topology.py runs the compose topology as processes)"
CLOSED_PIPE = ("exits 141 or 0, whichever of head and the tool finishes first, and blocks run with pipefail: "
               "tests/interop/test_cli_rough_edges.py checks the quiet closed pipe")

# (page, first line of the block) -> why the test does not run it.
NOT_RUN = {
    ("README.md", "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && pybroker start --config configs/server.properties"):
        INSTALLS + "; its `pybroker start` is the page's default broker, which the test starts",
    ("README.md", "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && python -m pytest"):
        "installs packages and runs the whole suite: .ci/run's command, the one running this test",
    ("README.md", "docker compose -f docker/compose.yaml up"): DOCKER,
    ("docs/index.md", "python3 -m venv .venv && . .venv/bin/activate && pip install -e ."): INSTALLS,
    ("docs/index.md", "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && python -m pytest"):
        "installs packages and runs the whole suite: .ci/run's command, the one running this test",
    ("docs/cli.md", "pybroker configs --bootstrap-server 127.0.0.1:9092 --describe --all --entity-type brokers --entity-name 1 | head -n 5"):
        CLOSED_PIPE,
    ("docs/cli.md", "pybroker share-groups --bootstrap-server 127.0.0.1:9092 --describe --group workers --state"):
        "needs a share group with members: tests/interop/test_share_groups.py describes one this way",
    ("docs/cli.md", "pybroker share-groups --bootstrap-server 127.0.0.1:9092 --describe --group workers --offsets"):
        "needs a share group that consumed: tests/interop/test_share_group_offsets.py runs these four commands",
    ("docs/clusters.md", "docker build -f docker/Dockerfile -t pybroker ."): DOCKER,
    ("docs/clusters.md", "docker network create pybroker"): DOCKER + "; tests/cluster/test_docker_image.py runs this cluster where an engine answers",
    ("docs/clusters.md", "mkdir -p data/node-1 && sudo chown -R 1000:1000 data/node-1"): DOCKER + ", and sudo",
    ("docs/clusters.md", "docker compose -f docker/compose.yaml up -d"): DOCKER,
    ("docs/operations.md", "docker compose -f docker/compose.yaml -f docker/compose.monitoring.yaml up -d"): DOCKER,
    ("docs/operations.md", "pip install -e '.[test]'"):
        "installs packages, then runs as root (network namespaces) for 5 minutes: tests/faults/test_quick_run.py is the short run",
    ("docs/operations.md", "sudo .venv/bin/python -m tests.faults --seconds 3600 --seed 1 --out soak   # about 65 minutes"):
        "the one-hour soak, as root (network namespaces): its figures are in docs/RELIABILITY.md",
    ("docs/security.md", "Producer({"): "a fragment: a client of broker.example.com with certificate files of your own",
    ("docs/security.md", "from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion"):
        "needs the SASL_SSL listener of broker.example.com shown above it (tests/interop/test_sasl_scram.py makes users this way)",
    ("docs/spark.md", "from spark_jobs.session import spark_session"):
        "needs Java for PySpark and topic data: tests/spark/test_datasource.py reads segments this way",
    ("docs/spark.md", '(spark.read.format("pybroker")'): "a fragment: the log dirs of brokers b1-b3 mounted under /mnt",
    ("docs/spark.md", 'users = (spark.read.format("pybroker")        # spark: the session of the first example'):
        "needs Java for PySpark and a topic of framed values: tests/spark/test_registry_read.py reads them this way",
    ("docs/spark.md", "pip install '.[spark]'"): INSTALLS,
    ("docs/spark.md", "python -m spark_jobs.package_zip pybroker-spark.zip"):
        "submits to a Spark master at spark://host:7077: tests/spark/test_standalone_cluster.py submits with the zip",
    ("docs/spark.md", "spark-submit --master spark://host:7077 spark_jobs/topic_stats.py --path /shared/kafka-logs"):
        "needs a Spark standalone cluster and a shared filesystem: tests/spark/test_standalone_cluster.py",
    ("docs/spark.md", "spark-class org.apache.spark.deploy.master.Master --host 127.0.0.1 --port 7077 --webui-port 8080"):
        "a Spark master and worker, each in its own terminal: tests/spark/test_standalone_cluster.py starts them on free ports",
}
# Blocks after an HTML comment starting with one of these are run by a test of their own.
NOT_RUN_MARKERS = {
    "security walkthrough:": "run by tests/interop/test_docs_security_walkthrough.py, which then checks every refusal",
    "exactly-once example:": "run twice over its data by tests/interop/test_docs_exactly_once.py",
}


def not_run_reason(block: Block) -> str | None:
    for prefix, reason in NOT_RUN_MARKERS.items():
        if block.marker.startswith(prefix):
            return reason
    return NOT_RUN.get((block.page, block.first_line))


def runnable_blocks(page: str) -> list[Block]:
    return [b for b in page_blocks(page) if b.language in RUNNABLE_LANGUAGES]


def test_every_not_run_entry_names_a_block():
    blocks = {(b.page, b.first_line) for page in PAGES for b in runnable_blocks(page)}
    stale = [key for key in NOT_RUN if key not in blocks]
    assert not stale, f"NOT_RUN entries that match no block (moved or changed? update them): {stale}"


@pytest.mark.parametrize("page", PAGES)
def test_page_blocks_run_as_printed(page, tmp_path):
    blocks = runnable_blocks(page)
    to_run = [b for b in blocks if not_run_reason(b) is None]
    if not to_run:
        pytest.skip(f"{page}: no block to run ({len(blocks)} listed as not run with their reasons)")
    workspace = Workspace(tmp_path, blocks)
    try:
        for block in to_run:
            workspace.run(block)
    except BaseException:
        workspace.stop_server(check=False)
        raise
    workspace.stop_server()
