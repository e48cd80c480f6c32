"""librdkafka's own test suite against pybroker (issue 17).

    python -m tests.compat.librdkafka SOURCE_DIR            # build if needed, run the selection
    python -m tests.compat.librdkafka SOURCE_DIR --tests 0001,0045 --parallel 1
    python -m tests.compat.librdkafka SOURCE_DIR --check-selection   # compare the data file with tests/test.c

SOURCE_DIR is a librdkafka source tree (the selection was made for v2.15.0), e.g.
``git clone -b v2.15.0 https://github.com/confluentinc/librdkafka``. If its test
runner is not built yet, the command builds it first: ``./configure`` with what
the machine has (no ``--install-deps``, nothing downloaded), ``make libs`` and
``make -C tests test-runner``.

It then starts one pybroker on an ephemeral 127.0.0.1 port with a fresh log dir
and the broker settings of the suite's "default" scenario, writes a ``test.conf``
for the runner as librdkafka's trivup harness does, and runs every selected test
in full mode (not ``-Q``): one ``test-runner`` process per test number, at most
``--parallel`` at once, each killed after its time cap. It prints one row per
test, then ``N passed, N failed, N skipped``, and exits 1 only when a test failed
that ``librdkafka_tests.toml`` does not list as a known failure (2: it could not
run: bad arguments, a build or broker start-up that failed).

What runs, what is left out and why, and the known failures with their issues
live in ``librdkafka_tests.toml`` next to this file. Logs (the build, the broker,
one runner log per test number) and ``results.json`` stay in the work directory,
printed at the start and the end; the broker's data is removed unless --keep-data.

Longer than ~700 lines on purpose: the build, the broker, the runner processes
and the parsing of their three kinds of output are one command's steps, read in
order; each piece is small and none is used elsewhere.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DATA_FILE = Path(__file__).with_name("librdkafka_tests.toml")

# As in tests/conftest.py: the broker's line once its listener is bound.
STARTED_LINE = re.compile(r"pybroker started: .* listening on (?P<host>[^\s:]+):(?P<port>\d+)")
BROKER_START_TIMEOUT_S = 60
BROKER_STOP_TIMEOUT_S = 30

EXIT_OK = 0
EXIT_UNEXPECTED_FAILURE = 1
EXIT_CANNOT_RUN = 2

# Categories of broker-facing tests that are left out (see the data file).
EXCLUSION_CATEGORIES = {
    "sockem": "needs sockem socket emulation (TEST_F_SOCKEM)",
    "noautocreate": "needs the noautocreate scenario (auto.create.topics.enable=false)",
    "scenario": "needs another of the suite's scenarios than default",
    "ssl-sasl-oidc": "needs an SSL, SASL or OIDC listener",
    "kafka-cli": "runs Kafka's command-line tools or Java client (KAFKA_PATH), or needs ZooKeeper",
    "follower-fetch": "needs several brokers with racks (KIP-392 fetch from follower)",
    "share-consumer": "share groups (KIP-932, Kafka 4.2)",
}

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


class CannotRun(Exception):
    """The suite cannot run (build, broker start-up, arguments): exit code 2 with this message."""


# --------------------------------------------------------------------------------------
# The data file: selection, exclusions, known failures


@dataclasses.dataclass(frozen=True)
class KnownFailure:
    issue: int
    reason: str


@dataclasses.dataclass(frozen=True)
class Exclusion:
    category: str
    reason: str


@dataclasses.dataclass(frozen=True)
class Selection:
    librdkafka_version: str
    kafka_version: str
    default_timeout_s: int
    tests: tuple[str, ...]
    excluded: dict[str, Exclusion]
    known_failures: dict[str, KnownFailure]
    timeouts_s: dict[str, int]
    broker_config: dict[str, str]
    test_conf: dict[str, str]
    # More known failures when the suite runs with the consumer group protocol (KIP-848).
    known_failures_consumer: dict[str, KnownFailure] = dataclasses.field(default_factory=dict)

    def numbers(self) -> list[str]:
        """The selected test numbers, each once, in order."""
        return sorted({test_number(name) for name in self.tests})

    def tests_of(self, number: str) -> list[str]:
        return [name for name in self.tests if test_number(name) == number]

    def timeout_of(self, number: str) -> int:
        """A test number's time cap: the largest of its tests' caps."""
        return max(self.timeouts_s.get(name, self.default_timeout_s) for name in self.tests_of(number))


def test_number(name: str) -> str:
    """``0045_subscribe_update`` -> ``0045``: what the runner's TESTS variable matches."""
    return name.split("_", 1)[0]


def load_selection(path: Path = DATA_FILE) -> Selection:
    data = tomllib.loads(path.read_text())
    meta = data["meta"]

    def strings(table: dict) -> dict[str, str]:
        return {str(key): str(value).lower() if isinstance(value, bool) else str(value) for key, value in table.items()}

    return Selection(
        librdkafka_version=meta["librdkafka_version"],
        kafka_version=meta["kafka_version"],
        default_timeout_s=int(meta["default_timeout_s"]),
        tests=tuple(data["selection"]["tests"]),
        excluded={name: Exclusion(**entry) for name, entry in data.get("excluded", {}).items()},
        known_failures={name: KnownFailure(**entry) for name, entry in data.get("known_failures", {}).items()},
        known_failures_consumer={
            name: KnownFailure(**entry) for name, entry in data.get("known_failures_consumer", {}).items()
        },
        timeouts_s={name: int(value) for name, value in data.get("timeouts_s", {}).items()},
        broker_config=strings(data.get("broker", {})),
        test_conf=strings(data.get("test_conf", {})),
    )


def selection_problems(selection: Selection) -> list[str]:
    """Inconsistencies inside the data file itself (no source tree needed)."""
    problems = []
    seen: set[str] = set()
    for name in selection.tests:
        if not re.fullmatch(r"\d{4}_\w+", name):
            problems.append(f"{name}: not a test-runner test name (NNNN_what)")
        if name in seen:
            problems.append(f"{name}: selected twice")
        seen.add(name)
        if name in selection.excluded:
            problems.append(f"{name}: both selected and excluded")
    for name, exclusion in selection.excluded.items():
        if exclusion.category not in EXCLUSION_CATEGORIES:
            problems.append(f"{name}: unknown exclusion category {exclusion.category!r}")
        if not exclusion.reason.strip():
            problems.append(f"{name}: exclusion without a reason")
    for name, known in selection.known_failures.items():
        if name not in seen:
            problems.append(f"{name}: known failure that is not selected")
        if known.issue not in (17, 18, 19):
            problems.append(f"{name}: known failure for issue {known.issue}, not 17, 18 or 19")
        if not known.reason.strip():
            problems.append(f"{name}: known failure without a reason")
    for name, known in selection.known_failures_consumer.items():
        if name not in seen:
            problems.append(f"{name}: known consumer-protocol failure that is not selected")
        if name in selection.known_failures:
            problems.append(f"{name}: known failure listed for both group protocols")
        if known.issue != 33:
            problems.append(f"{name}: known consumer-protocol failure for issue {known.issue}, not 33")
        if not known.reason.strip():
            problems.append(f"{name}: known failure without a reason")
    for name in selection.timeouts_s:
        if name not in seen:
            problems.append(f"{name}: time cap for a test that is not selected")
    return problems


# --------------------------------------------------------------------------------------
# tests/test.c: the runner's table of tests


@dataclasses.dataclass(frozen=True)
class TestDecl:
    """One ``_TEST(...)`` entry of test.c's ``tests[]`` table."""

    name: str
    flags: frozenset[str]
    scenarios: tuple[str, ...]
    conditions: tuple[str, ...]  # the #if lines it sits under, e.g. ("WITH_SOCKEM",)

    @property
    def broker_facing(self) -> bool:
        """Needs a broker: neither local (no broker) nor manual."""
        return not self.flags & {"TEST_F_LOCAL", "TEST_F_MANUAL"}


_C_TOKENS = re.compile(r'"(?:\\.|[^"\\\n])*"|/\*.*?\*/|//[^\n]*', re.DOTALL)


def _strip_c_comments(text: str) -> str:
    """Comments out (their newlines kept), string literals left alone (``.extra = "https://..."``)."""

    def replace(match: re.Match) -> str:
        token = match.group(0)
        return token if token.startswith('"') else "\n" * token.count("\n")

    return _C_TOKENS.sub(replace, text)


def _split_top_level(args: str) -> list[str]:
    parts, depth, current, in_string = [], 0, [], False
    for index, char in enumerate(args):
        if char == '"' and (index == 0 or args[index - 1] != "\\"):
            in_string = not in_string
        elif not in_string and char in "([{":
            depth += 1
        elif not in_string and char in ")]}":
            depth -= 1
        elif not in_string and char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


def parse_test_declarations(test_c: str) -> list[TestDecl]:
    """The entries of ``struct test tests[]`` in librdkafka's tests/test.c."""
    start = test_c.index("struct test tests[] = {")
    end = test_c.index("{NULL}}", start)
    body = _strip_c_comments(test_c[start:end])
    decls: list[TestDecl] = []
    conditions: list[str] = []
    chunk: list[str] = []

    def flush() -> None:
        text = "".join(chunk)
        chunk.clear()
        position = 0
        while (found := text.find("_TEST(", position)) >= 0:
            depth, index = 0, found + len("_TEST")
            for index in range(found + len("_TEST"), len(text)):
                if text[index] == "(":
                    depth += 1
                elif text[index] == ")":
                    depth -= 1
                    if depth == 0:
                        break
            args = _split_top_level(text[found + len("_TEST(") : index])
            position = index + 1
            name, flags_expr = args[0], args[1] if len(args) > 1 else "0"
            flags = frozenset(re.findall(r"TEST_F_\w+", flags_expr))
            scenarios = ("default",)
            for extra in args[2:]:
                match = re.fullmatch(r'\.scenario\s*=\s*"([^"]*)"', extra)
                if match:
                    scenarios = tuple(match.group(1).split(","))
            decls.append(TestDecl(name, flags, scenarios, tuple(conditions)))

    for line in body.splitlines(keepends=True):
        directive = line.strip()
        if directive.startswith("#"):
            flush()
            if directive.startswith(("#if", "#ifdef", "#ifndef")):
                conditions.append(directive.split(None, 1)[1] if " " in directive else directive)
            elif directive.startswith("#endif") and conditions:
                conditions.pop()
            continue
        chunk.append(line)
    flush()
    return decls


def automatic_exclusion(decl: TestDecl) -> str | None:
    """The exclusion category test.c's table alone decides, if any."""
    if "TEST_F_SOCKEM" in decl.flags:
        return "sockem"
    if "default" not in decl.scenarios:
        return "noautocreate" if "noautocreate" in decl.scenarios else "scenario"
    return None


def check_against_source(selection: Selection, decls: Sequence[TestDecl]) -> list[str]:
    """Every broker-facing test of test.c must be selected or excluded with a category, and nothing else."""
    problems = []
    by_name = {decl.name: decl for decl in decls}
    classified = set(selection.tests) | set(selection.excluded)
    for decl in decls:
        if not decl.broker_facing:
            continue
        auto = automatic_exclusion(decl)
        if decl.name in selection.tests and auto:
            problems.append(f"{decl.name}: selected, but test.c says {auto}")
        elif decl.name in selection.excluded and auto and selection.excluded[decl.name].category != auto:
            problems.append(f"{decl.name}: excluded as {selection.excluded[decl.name].category}, test.c says {auto}")
        elif decl.name not in classified and not auto:
            problems.append(f"{decl.name}: broker-facing test neither selected nor excluded")
    for name in sorted(classified):
        decl = by_name.get(name)
        if decl is None:
            problems.append(f"{name}: not in test.c's tests[] table")
        elif not decl.broker_facing:
            problems.append(f"{name}: local or manual in test.c (flags {' | '.join(sorted(decl.flags))})")
    for name in selection.tests:
        if re.search(r"share_consumer|fetch_from_follower|_local$", name):
            problems.append(f"{name}: selected, but its name says local, share consumer or follower fetch")
    return problems


# --------------------------------------------------------------------------------------
# The runner's output


@dataclasses.dataclass
class TestResult:
    name: str
    state: str  # "passed", "failed" or "skipped"
    duration_s: float | None = None
    reason: str = ""


_RUNNER_STATES = {"PASSED": "passed", "FAILED": "failed", "SKIPPED": "skipped", "RUNNING": "failed"}
# |<color> 0001_multiobj                            |     PASSED |  12.345s |[ reason][ <-- known issue...]
_SUMMARY_ROW = re.compile(
    r"^\|\s*(?P<name>\d{4}_\w+)\s*\|\s*(?P<state>PASSED|FAILED|SKIPPED|RUNNING|DNS)\s*\|"
    r"\s*(?P<duration>[\d.]+)s\s*\|(?P<rest>.*)$"
)
# ================= Test 0001_multiobj PASSED =================
_END_LINE = re.compile(r"=+ Test (?P<name>\d{4}_\w+) (?P<state>PASSED|FAILED|SKIPPED) =+")
# ### Test "0113_cooperative_rebalance (b_subscribe_with_cb_test:903)" failed at file.cpp:123:func() at DATE: ###
_FAILURE_LINE = re.compile(r'### Test "(?P<name>\d{4}_\w+)(?: \((?P<subtest>.*)\))?" failed at (?P<where>\S+) at .*###')
# [0016_client_swname          /  0.001s] WARN: SKIPPING TEST: reason   (TEST_SKIP)
_SKIP_LINE = re.compile(r"\[(?P<name>\d{4}_\w+)\s*/\s*[\d.]+s\] (?:WARN: )?SKIPPING TEST: (?P<reason>.*)$")


def _clean(line: str) -> str:
    return ANSI_ESCAPE.sub("", line).rstrip()


def parse_runner_output(text: str, report: dict | None = None) -> dict[str, TestResult]:
    """Per-test results of one test-runner run.

    States come from the TEST_REPORT JSON when there is one (``report``), else from
    the summary table the runner prints at the end, else from the "Test X PASSED"
    lines each test ends with (a runner killed before its summary). Reasons come
    from the summary table's failure/skip text, else the first "### Test ... failed"
    message, else the "SKIPPING TEST:" warning.
    """
    results: dict[str, TestResult] = {}
    lines = [_clean(line) for line in text.splitlines()]

    first_failure: dict[str, str] = {}
    skip_reasons: dict[str, str] = {}
    for index, line in enumerate(lines):
        if match := _FAILURE_LINE.search(line):
            message = lines[index + 1].strip() if index + 1 < len(lines) else ""
            subtest = f"{match.group('subtest')}: " if match.group("subtest") else ""
            first_failure.setdefault(match.group("name"), f"{subtest}{message}".strip())
        elif match := _SKIP_LINE.search(line):
            skip_reasons.setdefault(match.group("name"), match.group("reason").strip())

    # A failure marks the test failed for good (test_fail0 sets its state), even when
    # its thread exits at once and prints no end line.
    for name in first_failure:
        results[name] = TestResult(name, "failed")
    for line in lines:
        if match := _END_LINE.search(line):
            name = match.group("name")
            if results.get(name, TestResult(name, "")).state != "failed":
                results[name] = TestResult(name, _RUNNER_STATES[match.group("state")])

    for line in lines:
        if match := _SUMMARY_ROW.match(line):
            if match.group("state") == "DNS":
                continue
            name = match.group("name")
            rest = match.group("rest").split(" <-- known issue", 1)[0].strip()
            results[name] = TestResult(name, _RUNNER_STATES[match.group("state")], float(match.group("duration")), rest)

    for name, entry in ((report or {}).get("tests") or {}).items():
        state = _RUNNER_STATES.get(str(entry.get("state")))
        if state is None or not re.fullmatch(r"\d{4}_\w+", name):
            continue
        previous = results.get(name)
        results[name] = TestResult(name, state, float(entry.get("duration", 0.0)), previous.reason if previous else "")

    for name, result in results.items():
        if not result.reason:
            if result.state == "failed":
                result.reason = first_failure.get(name, "")
            elif result.state == "skipped":
                result.reason = skip_reasons.get(name, "")
    return results


def read_report(path: Path) -> dict | None:
    """The runner's TEST_REPORT file, or None if it is missing or not valid JSON (it is not escaped)."""
    try:
        return json.loads(path.read_text(errors="replace"))
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------------------
# Building librdkafka and its test runner


def _apt_hint(packages: str) -> str:
    return f"on Debian/Ubuntu: apt-get install {packages}; on Fedora: dnf install {packages.replace('build-essential', 'gcc gcc-c++ make')}"


def check_source_tree(source: Path) -> None:
    for relative in ("configure", "src/rdkafka.h", "tests/test.c", "tests/Makefile"):
        if not (source / relative).exists():
            raise CannotRun(
                f"{source} is not a librdkafka source tree ({relative} missing); "
                "give the directory of a clone, e.g. git clone -b v2.15.0 https://github.com/confluentinc/librdkafka"
            )


def source_version(source: Path) -> str:
    """The librdkafka version the tree declares (``#define RD_KAFKA_VERSION 0x020f00ff``)."""
    match = re.search(r"#define\s+RD_KAFKA_VERSION\s+0x([0-9a-fA-F]{8})", (source / "src/rdkafka.h").read_text())
    if not match:
        return "unknown"
    value = int(match.group(1), 16)
    return f"{value >> 24}.{(value >> 16) & 0xFF}.{(value >> 8) & 0xFF}"


def test_runner_path(source: Path) -> Path:
    return source / "tests" / "test-runner"


def missing_build_tools() -> list[str]:
    """What the build needs and this machine lacks, each with how to get it."""
    missing = []
    if not shutil.which("make"):
        missing.append("make (" + _apt_hint("make") + ")")
    if not shutil.which("bash"):
        missing.append("bash, which ./configure runs under")
    if not any(shutil.which(cc) for cc in ("cc", "gcc", "clang")):
        missing.append("a C compiler (" + _apt_hint("build-essential") + ")")
    if not any(shutil.which(cxx) for cxx in ("c++", "g++", "clang++")):
        missing.append("a C++ compiler, for librdkafka++ and the C++ tests (" + _apt_hint("g++") + ")")
    return missing


def _run_logged(cmd: list[str], cwd: Path, log, what: str) -> None:
    log.write(f"\n$ (cd {cwd} && {' '.join(cmd)})\n")
    log.flush()
    result = subprocess.run(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        raise CannotRun(f"{what} failed (exit {result.returncode}): {' '.join(cmd)} in {cwd}; see {log.name}")


def ensure_built(source: Path, work_dir: Path, jobs: int, out=sys.stdout) -> Path:
    """Build librdkafka and tests/test-runner unless the runner is there already."""
    runner = test_runner_path(source)
    if runner.exists() and os.access(runner, os.X_OK):
        print(f"test runner: {runner} (already built)", file=out)
        return runner
    missing = missing_build_tools()
    if missing:
        raise CannotRun("cannot build librdkafka: missing " + "; ".join(missing))
    log_path = work_dir / "build.log"
    print(f"building librdkafka and its test runner in {source} (make -j{jobs}; log: {log_path}) ...", file=out)
    out.flush()
    started = time.monotonic()
    with open(log_path, "w") as log:
        if not (source / "Makefile.config").exists():
            # Optional libraries (zstd, lz4, libsasl2, libcurl, OpenSSL, zlib, RapidJSON) are
            # used when found and disabled otherwise; --install-deps would download them.
            try:
                _run_logged(["./configure"], source, log, "./configure")
            except CannotRun as error:
                config_log = source / "config.log"
                tail = config_log.read_text(errors="replace").splitlines()[-15:] if config_log.exists() else []
                raise CannotRun(f"{error}\nlast lines of {config_log}:\n  " + "\n  ".join(tail)) from None
        _run_logged(["make", f"-j{jobs}", "libs"], source, log, "building librdkafka (make libs)")
        _run_logged(["make", f"-j{jobs}", "-C", "tests", "test-runner"], source, log, "building tests/test-runner")
    if not runner.exists():
        raise CannotRun(f"the build finished but {runner} is missing; see {log_path}")
    features = ""
    config_h = source / "config.h"
    if config_h.exists():
        enabled = re.findall(r"#define\s+WITH_(\w+)\s+1", config_h.read_text())
        features = f"; built with {', '.join(sorted(enabled))}" if enabled else ""
    print(f"built in {time.monotonic() - started:.0f} s{features}", file=out)
    return runner


# --------------------------------------------------------------------------------------
# The broker


class Broker:
    """One ``python -m broker start`` child on an ephemeral port, its output in ``broker.log``."""

    def __init__(self, data_dir: Path, config: dict[str, str]):
        self.data_dir = data_dir
        self.log_path = data_dir / "broker.log"
        self.overrides = {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "advertised.listeners": "",
            "log.dirs": str(data_dir / "logs"),
            **config,
        }
        self.process: subprocess.Popen | None = None
        self.bootstrap = ""

    def start(self) -> Broker:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "broker", "start"]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                cmd, cwd=self.data_dir, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + BROKER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            if match := STARTED_LINE.search(text):
                self.bootstrap = f"{match.group('host')}:{match.group('port')}"
                return self
            if self.process.poll() is not None:
                raise CannotRun(f"the broker exited with code {self.process.returncode} at start-up:\n{text[-3000:]}")
            time.sleep(0.1)
        self.stop()
        raise CannotRun(f"the broker did not start within {BROKER_START_TIMEOUT_S} s; see {self.log_path}")

    def exit_code(self) -> int | None:
        """None while it runs."""
        return None if self.process is None else self.process.poll()

    def stop(self) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(BROKER_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(BROKER_STOP_TIMEOUT_S)
        return self.process.returncode


def write_test_conf(path: Path, bootstrap: str, extra: dict[str, str]) -> None:
    """The runner's test.conf: what librdkafka's trivup harness writes for a PLAINTEXT cluster."""
    lines = [
        "# Written by python -m tests.compat.librdkafka for one run against pybroker.",
        f"bootstrap.servers={bootstrap}",
        "security.protocol=PLAINTEXT",
        *(f"{key}={value}" for key, value in extra.items()),
    ]
    path.write_text("\n".join(lines) + "\n")


# --------------------------------------------------------------------------------------
# Running the selection


@dataclasses.dataclass
class NumberRun:
    """One test-runner process: every selected test of one number."""

    number: str
    tests: list[str]
    cap_s: int
    log_path: Path
    exit_code: int | None = None
    killed: bool = False
    elapsed_s: float = 0.0
    results: dict[str, TestResult] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RunContext:
    """What every runner process of one run shares."""

    runner: Path
    source: Path
    conf_path: Path
    kafka_version: str
    bootstrap: str
    quick: bool
    # librdkafka's TEST_CONSUMER_GROUP_PROTOCOL: "classic" or "consumer" (KIP-848);
    # the suite's consumers get group.protocol set to it.
    group_protocol: str = "classic"
    running: dict[int, subprocess.Popen] = dataclasses.field(default_factory=dict)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    stopping: threading.Event = dataclasses.field(default_factory=threading.Event)

    def stop(self) -> None:
        """No new runner starts; the running ones are killed (their process groups)."""
        self.stopping.set()
        with self.lock:
            for process in self.running.values():
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _runner_env(
    source: Path,
    conf_path: Path,
    report_path: Path,
    number: str,
    kafka_version: str,
    bootstrap: str,
    group_protocol: str = "classic",
):
    env = dict(os.environ)
    # Settings of the caller's shell that would change what runs or how.
    for key in ("TESTS_SKIP", "TESTS_SKIP_BEFORE", "SUBTESTS", "TEST_SCENARIO", "CI", "TEST_CONSUMER_GROUP_PROTOCOL"):
        env.pop(key, None)
    library_path = os.pathsep.join([str(source / "src"), str(source / "src-cpp")])
    env.update(
        TESTS=number,
        TEST_KAFKA_VERSION=kafka_version,
        TEST_SCENARIO="default",
        RDKAFKA_TEST_CONF=str(conf_path),
        TEST_REPORT=str(report_path),
        BROKERS=bootstrap,
        TEST_CONSUMER_GROUP_PROTOCOL=group_protocol,
        LD_LIBRARY_PATH=os.pathsep.join(filter(None, [library_path, env.get("LD_LIBRARY_PATH")])),
        DYLD_LIBRARY_PATH=os.pathsep.join(filter(None, [library_path, env.get("DYLD_LIBRARY_PATH")])),
    )
    return env


def run_number(run: NumberRun, context: RunContext) -> NumberRun:
    test_dir = run.log_path.parent
    test_dir.mkdir(parents=True, exist_ok=True)
    report_path = test_dir / "report.json"
    # -L: skip the local tests that share a number; -E: no sockem tests; full mode unless quick.
    cmd = [str(context.runner), "-p1", "-L", "-E"] + (["-Q"] if context.quick else [])
    if shutil.which("stdbuf"):
        # The summary goes to stdout: unbuffered, it survives a runner killed by its own timeout.
        cmd = ["stdbuf", "-oL", "-eL", *cmd]
    env = _runner_env(
        context.source,
        context.conf_path,
        report_path,
        run.number,
        context.kafka_version,
        context.bootstrap,
        context.group_protocol,
    )
    started = time.monotonic()
    with open(run.log_path, "w") as log:
        log.write(f"$ TESTS={run.number} {' '.join(cmd)}   (cwd {test_dir}, cap {run.cap_s} s)\n")
        log.flush()
        with context.lock:
            if context.stopping.is_set():
                return run
            process = subprocess.Popen(
                cmd, cwd=test_dir, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
            context.running[process.pid] = process
        try:
            run.exit_code = process.wait(run.cap_s)
        except subprocess.TimeoutExpired:
            run.killed = True
            os.killpg(process.pid, signal.SIGKILL)
            run.exit_code = process.wait()
        finally:
            with context.lock:
                context.running.pop(process.pid, None)
    run.elapsed_s = time.monotonic() - started
    parsed = parse_runner_output(run.log_path.read_text(errors="replace"), read_report(report_path))
    run.results = settle_results(run, parsed)
    return run


def settle_results(run: NumberRun, parsed: dict[str, TestResult]) -> dict[str, TestResult]:
    """One result per selected test of the run, whatever became of the runner."""
    results = {}
    for name in run.tests:
        result = parsed.get(name)
        if result is None:
            if run.killed:
                reason = f"no result: killed after the {run.cap_s} s cap"
            else:
                reason = f"no result: test-runner exited with code {run.exit_code}"
            result = TestResult(name, "failed", None, reason)
        results[name] = result
    if run.exit_code not in (0, None) and not run.killed and all(r.state != "failed" for r in results.values()):
        # Every test passed or skipped yet the runner failed: upstream's run-test.sh counts
        # that as a failed run (e.g. librdkafka threads or objects left behind at exit).
        main_failure = parse_main_failure(run.log_path.read_text(errors="replace"))
        for result in results.values():
            if result.state == "passed":
                result.state = "failed"
                result.reason = f"test-runner exited with code {run.exit_code} after the test passed: {main_failure}"
    if run.killed:
        for result in results.values():
            if result.state == "failed" and not result.reason:
                result.reason = f"killed after the {run.cap_s} s cap"
    return results


def parse_main_failure(text: str) -> str:
    for line in map(_clean, text.splitlines()):
        if "still active in librdkafka" in line or "Not all internal librdkafka objects destroyed" in line:
            return line.split("]", 1)[-1].strip()
    return "see the runner log"


# --------------------------------------------------------------------------------------
# Report


@dataclasses.dataclass
class Row:
    name: str
    state: str
    duration_s: float | None
    note: str
    known: KnownFailure | None
    log: str

    @property
    def unexpected(self) -> bool:
        return self.state == "failed" and self.known is None


def make_rows(selection: Selection, runs: Iterable[NumberRun], group_protocol: str = "classic") -> list[Row]:
    rows = []
    for run in runs:
        for name, result in run.results.items():
            known = selection.known_failures.get(name)
            if known is None and group_protocol == "consumer":
                known = selection.known_failures_consumer.get(name)
            note = result.reason
            if known and result.state == "failed":
                note = f"known, issue {known.issue}: {known.reason}"
            elif known and result.state == "passed":
                note = f"listed as a known failure (issue {known.issue}) but passed"
            rows.append(Row(name, result.state, result.duration_s, note, known, str(run.log_path)))
    return sorted(rows, key=lambda row: row.name)


def counts_line(rows: Sequence[Row]) -> str:
    passed = sum(row.state == "passed" for row in rows)
    failed = sum(row.state == "failed" for row in rows)
    skipped = sum(row.state == "skipped" for row in rows)
    return f"{passed} passed, {failed} failed, {skipped} skipped"


def format_table(rows: Sequence[Row], note_width: int = 110) -> str:
    width = max([len(row.name) for row in rows] + [4])
    lines = [f"{'test':<{width}}  {'result':<8}  {'time':>7}  note", "-" * (width + 30)]
    for row in rows:
        state = "FAILED" if row.unexpected else row.state
        duration = f"{row.duration_s:.1f}s" if row.duration_s is not None else "-"
        note = row.note if len(row.note) <= note_width else row.note[: note_width - 3] + "..."
        lines.append(f"{row.name:<{width}}  {state:<8}  {duration:>7}  {note}".rstrip())
    return "\n".join(lines)


def format_markdown_failures(rows: Sequence[Row]) -> str:
    lines = ["| test | issue | reason |", "| --- | --- | --- |"]
    for row in rows:
        if row.state != "failed":
            continue
        issue = str(row.known.issue) if row.known else "none (unexpected)"
        reason = row.known.reason if row.known else row.note
        lines.append(f"| {row.name} | {issue} | {reason.replace('|', '/')} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# The command


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.compat.librdkafka",
        description="Run librdkafka's own test suite (a selection, full mode) against one pybroker.",
        epilog="Exit codes: 0 no unexpected failure, 1 an unexpected failure, 2 could not run.",
    )
    parser.add_argument("source", type=Path, help="a librdkafka source tree (v2.15.0), built or not")
    parser.add_argument("--tests", help="comma-separated test numbers or names out of the selection (default: all)")
    parser.add_argument("--parallel", type=int, default=2, help="test-runner processes at once (default 2)")
    parser.add_argument("--cap", type=int, help="time cap per test number in seconds (default: the data file's)")
    parser.add_argument("--jobs", type=int, default=2, help="make -j for the build (default 2)")
    parser.add_argument("--work-dir", type=Path, help="where logs and the broker's data go (default: a new temp dir)")
    parser.add_argument("--kafka-version", help="TEST_KAFKA_VERSION for the runner (default: the data file's, 3.9.0)")
    parser.add_argument(
        "--broker-override", action="append", default=[], metavar="KEY=VALUE", help="one more broker setting"
    )
    parser.add_argument(
        "--group-protocol",
        choices=("classic", "consumer"),
        default="classic",
        help="the suite's consumers' group.protocol (TEST_CONSUMER_GROUP_PROTOCOL; consumer: KIP-848)",
    )
    parser.add_argument("--quick", action="store_true", help="the runner's quick mode (-Q) instead of full mode")
    parser.add_argument("--no-build", action="store_true", help="fail instead of building a missing test runner")
    parser.add_argument("--markdown", action="store_true", help="also print the failures as a Markdown table")
    parser.add_argument(
        "--keep-data", action="store_true", help="keep the broker's log dir (about 1 GB after a full run)"
    )
    parser.add_argument(
        "--check-selection", action="store_true", help="only compare the data file with SOURCE's tests/test.c"
    )
    parser.add_argument("--data-file", type=Path, default=DATA_FILE, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def pick_numbers(selection: Selection, wanted: str | None) -> list[str]:
    numbers = selection.numbers()
    if not wanted:
        return numbers
    picked = []
    for item in filter(None, (part.strip() for part in wanted.split(","))):
        number = test_number(item)
        if number not in numbers:
            raise CannotRun(f"{item} is not in the selection (see {DATA_FILE.name})")
        if number not in picked:
            picked.append(number)
    return picked


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return _main(args)
    except CannotRun as error:
        print(f"librdkafka suite: {error}", file=sys.stderr)
        return EXIT_CANNOT_RUN


def _main(args: argparse.Namespace) -> int:
    selection = load_selection(args.data_file)
    problems = selection_problems(selection)
    if problems:
        raise CannotRun(f"{args.data_file} is inconsistent:\n  " + "\n  ".join(problems))
    source = args.source.resolve()
    check_source_tree(source)
    version = source_version(source)
    source_problems = check_against_source(selection, parse_test_declarations((source / "tests/test.c").read_text()))
    if args.check_selection:
        print(
            f"librdkafka {version} in {source}: {len(selection.tests)} tests selected, {len(selection.excluded)} excluded"
        )
        for problem in source_problems:
            print(f"  {problem}")
        return EXIT_UNEXPECTED_FAILURE if source_problems else EXIT_OK
    if args.parallel < 1 or args.jobs < 1:
        raise CannotRun("--parallel and --jobs must be at least 1")
    numbers = pick_numbers(selection, args.tests)
    overrides = dict(selection.broker_config)
    for item in args.broker_override:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CannotRun(f"--broker-override {item!r}: expected KEY=VALUE")
        overrides[key.strip()] = value.strip()
    kafka_version = args.kafka_version or selection.kafka_version

    work_dir = (args.work_dir or Path(tempfile.mkdtemp(prefix="pybroker-librdkafka-"))).resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    print(f"librdkafka {version} in {source}; work dir {work_dir}")
    if version != selection.librdkafka_version.lstrip("v"):
        print(f"warning: the selection was made for librdkafka {selection.librdkafka_version}, this is {version}")
    for problem in source_problems:
        print(f"warning: {problem}")

    if args.no_build and not test_runner_path(source).exists():
        raise CannotRun(f"{test_runner_path(source)} is not built (drop --no-build to build it)")
    runner = ensure_built(source, work_dir, args.jobs)

    broker = Broker(work_dir / "broker", overrides).start()
    conf_path = work_dir / "test.conf"
    try:
        write_test_conf(conf_path, broker.bootstrap, selection.test_conf)
    except BaseException:
        broker.stop()
        raise
    mode = "quick" if args.quick else "full"
    print(
        f"pybroker on {broker.bootstrap} (log {broker.log_path}); TEST_KAFKA_VERSION={kafka_version}; {mode} mode; "
        f"group.protocol={args.group_protocol}; "
        f"{sum(len(selection.tests_of(n)) for n in numbers)} tests in {len(numbers)} runner processes, "
        f"{args.parallel} at once"
    )
    sys.stdout.flush()

    runs = [
        NumberRun(
            number,
            selection.tests_of(number),
            args.cap or selection.timeout_of(number),
            work_dir / "tests" / number / "runner.log",
        )
        for number in numbers
    ]
    # The longest-capped first, so that a long test does not start last.
    order = sorted(runs, key=lambda run: (-run.cap_s, run.number))
    context = RunContext(runner, source, conf_path, kafka_version, broker.bootstrap, args.quick, args.group_protocol)
    done: list[NumberRun] = []
    started = time.monotonic()
    broker_exit: int | None = None
    interrupted = False
    pool = ThreadPoolExecutor(max_workers=args.parallel)
    try:
        futures = [pool.submit(run_number, run, context) for run in order]
        for future in as_completed(futures):
            run = future.result()
            if run.exit_code is None:  # never started: interrupted
                continue
            done.append(run)
            states = [result.state for result in run.results.values()]
            summary = ", ".join(f"{states.count(s)} {s}" for s in ("passed", "failed", "skipped") if states.count(s))
            killed = f" (killed at the {run.cap_s} s cap)" if run.killed else ""
            print(
                f"[{len(done)}/{len(runs)}, {time.monotonic() - started:5.0f} s] {run.number}: {summary} "
                f"in {run.elapsed_s:.0f} s{killed}"
            )
            sys.stdout.flush()
            if broker.exit_code() is not None and broker_exit is None:
                broker_exit = broker.exit_code()
                print(f"the broker exited with code {broker_exit} during the run; see {broker.log_path}")
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: stopping the running tests; the table shows the finished ones")
        context.stop()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        stop_code = broker.stop()
        if broker_exit is None and stop_code not in (0, None):
            print(f"the broker stopped with exit code {stop_code} (0 expected); see {broker.log_path}")
        if not args.keep_data:
            shutil.rmtree(broker.data_dir / "logs", ignore_errors=True)

    rows = make_rows(selection, done, args.group_protocol)
    print()
    print(format_table(rows))
    unexpected = [row for row in rows if row.unexpected]
    known_failed = [row for row in rows if row.state == "failed" and row.known]
    fixed = [row for row in rows if row.state == "passed" and row.known]
    print()
    print(f"total time {time.monotonic() - started:.0f} s; logs in {work_dir}")
    if args.markdown:
        print()
        print(format_markdown_failures(rows))
        print()
    if fixed:
        print("known failures that passed (take them off the list?): " + ", ".join(row.name for row in fixed))
    if unexpected:
        print("unexpected failures:")
        for row in unexpected:
            print(f"  {row.name}: {row.note}\n    log: {row.log}")
    print(f"failures: {len(known_failed)} known, {len(unexpected)} unexpected")
    (work_dir / "results.json").write_text(
        json.dumps(
            {
                "librdkafka_version": version,
                "kafka_version": kafka_version,
                "mode": mode,
                "broker_config": overrides,
                "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                "counts": counts_line(rows),
                "rows": [dataclasses.asdict(row) for row in rows],
            },
            indent=2,
            default=str,
        )
    )
    print(counts_line(rows))
    if interrupted:
        return 130
    if broker_exit is not None:
        return EXIT_UNEXPECTED_FAILURE
    return EXIT_UNEXPECTED_FAILURE if unexpected else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
