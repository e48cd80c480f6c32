"""The Java Kafka client (kafka-clients) against pybroker: the checks of tests/compat/java.

tests/compat/java is a small Maven project (kafka-clients 4.1.1 and slf4j-simple) whose main
program runs named checks against one broker and prints ``PASS name``, ``FAIL name: reason``
or ``SKIP name: reason`` for each: the admin client (topics, cluster, configs), idempotent
acks=all producers with every codec and headers, a transactional producer (commit, abort,
offsets sent to the transaction, read_committed), a classic-protocol consumer group of two
members that commits and resumes, offsetsForTimes / beginning and end offsets, and the admin
client's group calls. Here it is built once per module and run once against one broker, and
each check is one test below.

Building: ``mvn -q -o package`` when the dependencies are in ~/.m2, else ``mvn -q package``
(the first time it downloads kafka-clients, its codecs and the build plugins from Maven
Central); the result is one shaded jar, target/java-client-checks-0.1.0.jar. The module
skips, saying why, when ``java``/``javac`` or ``mvn`` is missing or Maven cannot resolve the
dependencies (no Maven registry). Two environment variables change that:

- ``PYBROKER_KAFKA_CLIENT_JARS``: a folder with a kafka-clients jar and its runtime
  dependencies (lz4-java, snappy-java, zstd-jni, slf4j-api, optionally an slf4j binding); the
  program is then compiled with ``javac`` against them and Maven is not used. This runs the
  checks with whatever client version the folder holds.
- ``PYBROKER_JAVA_MVN_ARGS``: more Maven arguments, e.g. ``-Dkafka.version=4.0.1`` or
  ``-Dmaven.repo.local=DIR``.

Once the jars are cached the module takes 10-25 s (the offline build about 5 s, the checks
about 8 s, on 2 busy cores); the program's own deadline is 60 s and every subprocess here has
a timeout.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# The build and the run are module fixtures, each bounded by its own subprocess timeout.
pytestmark = pytest.mark.timeout(90, func_only=True)

JAVA_DIR = Path(__file__).resolve().parent / "java"
MAIN_CLASS = "pybroker.compat.JavaClientChecks"
JVM_FLAGS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]  # a light JVM: the checks are short

OFFLINE_BUILD_TIMEOUT_S = 120
ONLINE_BUILD_TIMEOUT_S = 1200  # only the first build, which downloads the dependencies
RUN_DEADLINE_S = 60
RUN_TIMEOUT_S = RUN_DEADLINE_S + 20

# The checks, in the program's order (`JavaClientChecks --list`; test_check_list compares).
CHECKS = [
    "admin.createTopics",
    "admin.describeTopics",
    "admin.describeTopicsById",
    "admin.describeCluster",
    "admin.describeConfigs",
    "admin.incrementalAlterConfigs",
    "admin.listTopics",
    "produce.none",
    "produce.gzip",
    "produce.snappy",
    "produce.lz4",
    "produce.zstd",
    "produce.pipelined",
    "produce.idempotentState",
    "produce.transactional",
    "produce.transactionsV2",
    "consumer.group",
    "consumer.resume",
    "consumer.offsetsForTimes",
    "consumer.beginningEndOffsets",
    "groups.list",
    "groups.describe",
    "groups.listOffsets",
    "groups.delete",
    "admin.deleteTopics",
]

# Checks that fail against today's broker, and why. A listed check that passes fails its test:
# take it off the list.
# Checks expected to fail against this broker, with why; none today.
KNOWN_FAILURES: dict[str, str] = {}

RESOLUTION_FAILURE = re.compile(
    r"Could not resolve dependencies|Failed to read artifact descriptor|Could not transfer artifact"
    r"|in offline mode|has not been downloaded from it before|Non-resolvable|could not be resolved"
    r"|Unknown host|Could not find artifact|PluginResolutionException|Connection refused|Connect timed out"
)
LINE = re.compile(r"^(PASS|FAIL|SKIP) (\S+?)(?::| |$)(.*)$")


@dataclass
class Build:
    classpath: str
    how: str
    seconds: float


@dataclass
class Run:
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    broker_log: str
    lines: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (verdict, rest of the line)


def _first_error(output: str) -> str:
    """Maven's first ERROR line, its end kept (where the cause is: "Unknown host ...")."""
    for line in output.splitlines():
        line = re.sub(r"\x1b\[[0-9;]*m", "", line).replace(" -> [Help 1]", "").strip()
        if line.startswith("[ERROR]") and len(line) > len("[ERROR]") + 1:
            return line if len(line) <= 320 else "[ERROR] ..." + line[-300:]
    return output.strip()[-300:]


def _mvn(args: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["MAVEN_OPTS"] = (env.get("MAVEN_OPTS", "") + " " + " ".join(JVM_FLAGS)).strip()
    extra = shlex.split(os.environ.get("PYBROKER_JAVA_MVN_ARGS", ""))
    try:
        return subprocess.run(
            ["mvn", "-q", "-B", *args, *extra, "package"],
            check=False, cwd=JAVA_DIR, env=env, capture_output=True, text=True, timeout=timeout_s,
        )  # fmt: skip
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"mvn {' '.join(args)} package did not finish in {timeout_s} s:\n{e.stdout}\n{e.stderr}")


def _build_with_maven() -> Build:
    if shutil.which("mvn") is None:
        pytest.skip("mvn (Maven) is not installed: the Java client checks are built with it "
                    "(or set PYBROKER_KAFKA_CLIENT_JARS to a folder of kafka-clients jars)")  # fmt: skip
    started = time.monotonic()
    how = "mvn -q -o package"
    result = _mvn(["-o"], OFFLINE_BUILD_TIMEOUT_S)
    output = result.stdout + result.stderr
    if result.returncode != 0 and RESOLUTION_FAILURE.search(output):
        # Not everything is in ~/.m2 yet: once online (slow the first time only).
        how = "mvn -q package (online: dependencies not cached)"
        result = _mvn([], ONLINE_BUILD_TIMEOUT_S)
        output = result.stdout + result.stderr
        if result.returncode != 0 and RESOLUTION_FAILURE.search(output):
            pytest.skip(
                "Maven cannot resolve the Java client checks' dependencies (org.apache.kafka:kafka-clients; "
                f"no reachable Maven registry?): {_first_error(output)}. Set PYBROKER_KAFKA_CLIENT_JARS to a "
                "folder of kafka-clients jars to run the checks without Maven"
            )  # fmt: skip
    if result.returncode != 0:
        pytest.fail(f"{how} failed (exit {result.returncode}):\n{output[-6000:]}")
    jar = JAVA_DIR / "target" / "java-client-checks-0.1.0.jar"  # the shaded jar: checks and dependencies
    if not jar.is_file():
        pytest.fail(f"{how} succeeded but left no {jar}:\n{output[-3000:]}")
    return Build(str(jar), how, time.monotonic() - started)


def _build_with_javac(jars: Path, out: Path) -> Build:
    if not jars.is_dir() or not any(jars.glob("kafka-clients*.jar")):
        pytest.fail(f"PYBROKER_KAFKA_CLIENT_JARS={jars} is not a folder holding a kafka-clients*.jar")
    started = time.monotonic()
    jar_glob = str(jars / "*")
    sources = sorted(str(p) for p in (JAVA_DIR / "src" / "main" / "java").rglob("*.java"))
    cmd = ["javac", *(f"-J{flag}" for flag in JVM_FLAGS), "--release", "17", "-cp", jar_glob, "-d", str(out), *sources]
    try:
        result = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=OFFLINE_BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"javac did not finish in {OFFLINE_BUILD_TIMEOUT_S} s")
    if result.returncode != 0:
        pytest.fail(f"javac against {jars} failed:\n{result.stdout}{result.stderr}"[-6000:])
    return Build(os.pathsep.join([str(out), jar_glob]), f"javac against {jars}", time.monotonic() - started)


@pytest.fixture(scope="module")
def java_build(tmp_path_factory) -> Build:
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed: the Java client checks need a JDK 17+")
    jars = os.environ.get("PYBROKER_KAFKA_CLIENT_JARS")
    if jars:
        return _build_with_javac(Path(jars), tmp_path_factory.mktemp("java-classes"))
    return _build_with_maven()


def _java(build: Build, *args: str, timeout_s: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["java", *JVM_FLAGS, "-cp", build.classpath, MAIN_CLASS, *args], check=False,
        capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip


@pytest.fixture(scope="module")
def java_run(java_build, shared_broker) -> Run:
    """The whole program once against the module's broker."""
    started = time.monotonic()
    try:
        result = _java(
            java_build, shared_broker.bootstrap, "--deadline-s", str(RUN_DEADLINE_S), timeout_s=RUN_TIMEOUT_S
        )
        returncode, stdout, stderr = result.returncode, result.stdout, result.stderr
    except subprocess.TimeoutExpired as e:
        returncode = None
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        stderr = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
    run = Run(returncode, stdout, stderr, time.monotonic() - started, shared_broker.log_text())
    for line in stdout.splitlines():
        match = LINE.match(line)
        if match:
            run.lines.setdefault(match.group(2), (match.group(1), line))
    return run


def _broker_excerpt(run: Run, limit: int = 30) -> str:
    interesting = [line for line in run.broker_log.splitlines() if not re.search(r"\bINFO\b", line)]
    return "\n".join(interesting[-limit:]) or "(no WARNING/ERROR lines)"


def _stack_of(run: Run, name: str) -> str:
    marker = f"FAIL {name} stack trace:"
    if marker not in run.stderr:
        return ""
    return run.stderr.split(marker, 1)[1].split("\nFAIL ", 1)[0][:3000]


def test_check_list(java_build):
    """The program's checks are the ones this module has a test for."""
    result = _java(java_build, "--list", timeout_s=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == CHECKS


@pytest.mark.parametrize("name", CHECKS)
def test_java_client(java_run, name):
    if name not in java_run.lines:
        pytest.fail(
            f"no line for {name}: the program exited {java_run.returncode} after {java_run.seconds:.1f} s\n"
            f"stdout:\n{java_run.stdout[-3000:]}\nstderr (end):\n{java_run.stderr[-3000:]}\n"
            f"broker log:\n{_broker_excerpt(java_run)}"
        )
    verdict, line = java_run.lines[name]
    if name in KNOWN_FAILURES:
        if verdict == "FAIL":
            pytest.xfail(f"known: {KNOWN_FAILURES[name]} ({line})")
        pytest.fail(f"{name} is listed in KNOWN_FAILURES but did not fail: {line}; take it off the list")
    if verdict == "SKIP":
        pytest.skip(line)
    assert verdict == "PASS", (
        f"{line}\n{_stack_of(java_run, name)}\nbroker log (non-INFO lines, end):\n{_broker_excerpt(java_run)}"
    )


def test_exit_code_and_cleanup(java_run):
    """Exit code 0 exactly when no check failed, and the program's own clean-up worked."""
    assert "cleanup" not in java_run.lines, java_run.lines.get("cleanup")
    assert java_run.returncode is not None, f"the program did not finish in {RUN_TIMEOUT_S} s"
    failed = [name for name, (verdict, _) in java_run.lines.items() if verdict == "FAIL"]
    assert java_run.returncode == (1 if failed else 0), (java_run.returncode, failed, java_run.stderr[-2000:])
    assert set(failed) <= set(KNOWN_FAILURES), failed
