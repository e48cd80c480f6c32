"""The container entrypoint: Apache Kafka's environment variables to a pybroker node.

``python -m broker.container`` (the Docker image's ENTRYPOINT) configures a
node the way the official ``apache/kafka`` image does, so that compose files
written for it work here:

* Every environment variable ``KAFKA_<NAME>`` is the server.properties key
  ``<name>``: ``KAFKA_`` stripped, lower-cased, then ``___`` -> ``-``,
  ``__`` -> ``_`` and ``_`` -> ``.`` (``KAFKA_LOG_DIRS`` -> ``log.dirs``,
  ``KAFKA_FOO__BAR___BAZ`` -> ``foo_bar-baz``). The launcher's own variables
  (``JVM_SETTINGS``) are not broker keys and are ignored.
* They override the keys of a base properties file: ``PYBROKER_BASE_CONFIG``
  (or ``--base-config``) when given. Without one, as in the apache/kafka
  image, the variables are the whole config (only ``log.dirs`` defaults to the
  data volume, /var/lib/pybroker); with no variable at all the image runs its
  single-node configs/server.properties with ``IMAGE_DEFAULTS`` on top (every
  interface, advertised as 127.0.0.1:9092, data in /var/lib/pybroker).
* ``CLUSTER_ID`` is the id the storage is formatted with on first start.
  Storage already formatted is left alone, so a restarted container keeps its
  data. A node of a multi-node quorum cannot make an id up (every node must
  carry the same one), so there it is required.
* The merged file is written to ``PYBROKER_CONFIG_FILE`` (or ``--config-file``),
  by default ``server.properties`` in the first log dir (the data volume), and
  the process is replaced by ``pybroker start --config FILE``: the broker is
  then PID 1 and gets the SIGTERM of ``docker stop`` itself, which it treats as
  a controlled shutdown.

Arguments not starting with "-" are a command run instead (``docker run IMAGE
pybroker storage random-uuid``).

The data directories must be writable by the user the container runs as (the
image's ``pybroker``, uid 1000, unless ``--user`` says otherwise). A bind mount
of a host directory keeps its host owner, so a root-owned one is refused with
one line saying what to do (``chown``, or ``--user``) and the storage exit
code 3, as ``pybroker start`` uses, instead of a traceback.

``python -m broker.container --healthcheck`` is the image's HEALTHCHECK: it
reads the config the entrypoint wrote (found the same way, from the same
environment) and checks the node on its own listener: a broker listener
(PLAINTEXT preferred) with ``pybroker healthcheck``'s checks, or on a
controller-only node its controller listener with an ApiVersions round trip.

Keys pybroker does not know are written as given; pybroker warns about them at
start, as it does for any config file.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import stat
import sys
import tempfile
from pathlib import Path
from typing import Callable, Mapping

from broker.config import ConfigError, load_config_file, parse_properties
from storage.meta_properties import META_PROPERTIES, MetaPropertiesError, check_cluster_id, format_storage

ENV_PREFIX = "KAFKA_"
CLUSTER_ID_ENV = "CLUSTER_ID"
BASE_CONFIG_ENV = "PYBROKER_BASE_CONFIG"
CONFIG_FILE_ENV = "PYBROKER_CONFIG_FILE"
# Client properties (as --command-config) for a healthcheck whose listener is not PLAINTEXT.
HEALTHCHECK_CONFIG_ENV = "PYBROKER_HEALTHCHECK_COMMAND_CONFIG"
# `pybroker start`'s exit code for storage errors (broker/cli.py EXIT_STORAGE),
# so that a data directory the container cannot write ends the same way.
EXIT_STORAGE = 3
CONFIG_FILE_NAME = "server.properties"
# Relative to the image's WORKDIR (/opt/pybroker), where the Dockerfile copies configs/.
IMAGE_BASE_CONFIG = Path("configs") / "server.properties"

# Variables starting with KAFKA_ that Kafka's launch scripts (kafka-run-class.sh,
# the image's scripts) read for the JVM, logging or the image itself. They are
# not server.properties keys: the apache/kafka image skips them, and so does this
# entrypoint, so a compose file that sets e.g. KAFKA_HEAP_OPTS does not turn into
# a bogus "heap.opts" key.
JVM_SETTINGS = frozenset(
    {
        "KAFKA_HEAP_OPTS",
        "KAFKA_JVM_PERFORMANCE_OPTS",
        "KAFKA_GC_LOG_OPTS",
        "KAFKA_LOG4J_OPTS",
        "KAFKA_LOG4J_ROOT_LOGLEVEL",
        "KAFKA_LOG4J_LOGGERS",
        "KAFKA_TOOLS_LOG4J_LOGLEVEL",
        "KAFKA_OPTS",
        "KAFKA_JMX_OPTS",
        "KAFKA_JMX_PORT",
        "KAFKA_JMX_HOSTNAME",
        "KAFKA_DEBUG",
        "KAFKA_VERSION",
        "KAFKA_HOME",
    }
)

# What the image ran with before it read environment variables, kept so that a
# plain `docker run -p 9092:9092 pybroker` still gives a reachable single node:
# bind every interface inside the container, advertise the address clients on
# the host reach through the published port, keep data in the image's volume.
IMAGE_DEFAULTS = {
    "listeners": "PLAINTEXT://0.0.0.0:9092",
    "advertised.listeners": "PLAINTEXT://127.0.0.1:9092",
    "log.dirs": "/var/lib/pybroker",
}

_UNDERSCORES = re.compile(r"_{1,3}")
_UNDERSCORE_MEANING = {"___": "-", "__": "_", "_": "."}


class ContainerError(RuntimeError):
    """A configuration the entrypoint refuses to start with (one line for the log)."""

    exit_code = 1


class DataDirNotWritable(ContainerError):
    """A data directory the container's user cannot write (a bind mount owned by someone else)."""

    exit_code = EXIT_STORAGE


def check_writable(directory: Path) -> None:
    """Make ``directory`` if needed and write a file into it; DataDirNotWritable if that fails.

    Writing is the only reliable test: os.access says yes to root everywhere
    and knows nothing of read-only mounts."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".pybroker-write-test-", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise DataDirNotWritable(_not_writable(directory, exc)) from None


def _not_writable(directory: Path, exc: OSError) -> str:
    if exc.errno == errno.EROFS:
        return f"the data directory {directory} is on a read-only file system: mount it read-write"
    if exc.errno in (errno.EEXIST, errno.ENOTDIR):
        return f"the data directory {directory} cannot be made: {exc.filename or directory} is in the way (not a directory)"
    if exc.errno not in (errno.EACCES, errno.EPERM):
        return f"the data directory {directory} cannot be written: {exc.strerror or exc}"
    uid, gid = os.geteuid(), os.getegid()
    owned = ""
    for existing in (directory, *directory.parents):
        try:
            info = existing.stat()
        except OSError:
            continue  # missing, or a parent this user cannot search: look further up
        owned = f" ({existing} is owned by {info.st_uid}:{info.st_gid}, mode {stat.S_IMODE(info.st_mode):o})"
        break
    return (
        f"the data directory {directory} is not writable by uid {uid}{owned}: chown it "
        f"(chown -R {uid}:{gid} on the host's directory) or run with --user as its owner "
        f"(docker run --user UID:GID, or user: \"UID:GID\" in compose)"
    )


def env_key(name: str) -> str | None:
    """The server.properties key an environment variable sets, or None."""
    if not name.startswith(ENV_PREFIX) or name in JVM_SETTINGS or len(name) == len(ENV_PREFIX):
        return None
    # One pass over each run of underscores, longest first, so that the "_" an
    # escaped "__" leaves behind is not turned into a "." afterwards.
    return _UNDERSCORES.sub(lambda m: _UNDERSCORE_MEANING[m.group()], name[len(ENV_PREFIX):].lower())


def env_properties(environ: Mapping[str, str]) -> dict[str, str]:
    """The broker keys the KAFKA_ variables set, in a stable (sorted) order."""
    properties = {}
    for name in sorted(environ):
        key = env_key(name)
        if key is not None:
            properties[key] = environ[name]
    return properties


def ignored_variables(environ: Mapping[str, str]) -> list[str]:
    return sorted(name for name in environ if name in JVM_SETTINGS)


def merged_properties(environ: Mapping[str, str], base_config: Path | None) -> tuple[dict[str, str], bool]:
    """(the node's properties, whether they start from the image's default base).

    With ``base_config`` None the base is the image's: configs/server.properties
    (when present) with IMAGE_DEFAULTS on top."""
    from_env = env_properties(environ)
    if base_config is not None:
        properties = _read_properties(base_config)
        image_base = False
    elif from_env:
        # As the apache/kafka image: once any broker variable is set, the
        # default single-node file is not used, so a cluster node inherits
        # nothing (node.id, listeners, replication factors) it did not ask
        # for. Only the data directory defaults to the image's volume.
        properties = {"log.dirs": IMAGE_DEFAULTS["log.dirs"]}
        image_base = False
    else:
        properties = _read_properties(IMAGE_BASE_CONFIG) if IMAGE_BASE_CONFIG.exists() else {}
        properties.update(IMAGE_DEFAULTS)
        image_base = True
    if "log.dir" in from_env and "log.dirs" not in from_env:
        properties.pop("log.dirs", None)  # log.dirs would win over its synonym
    properties.update(from_env)
    return properties, image_base


def _read_properties(path: Path) -> dict[str, str]:
    try:
        return parse_properties(Path(path).read_text())
    except OSError as exc:
        raise ContainerError(f"cannot read the base config {path}: {exc.strerror or exc}") from None


def _escape(text: str, *, key: bool = False) -> str:
    # java.util.Properties escapes, so that parse_properties reads back exactly the value.
    text = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    if key:
        return re.sub(r"([=: #!])", r"\\\1", text)
    return "\\" + text if text.startswith((" ", "\f")) else text


def render_properties(properties: Mapping[str, str]) -> str:
    lines = ["# Written by the pybroker container entrypoint (broker/container.py) at every start:",
             "# the base config with the KAFKA_ environment variables on top. Edits here are lost."]
    lines += [f"{_escape(key, key=True)}={_escape(value)}" for key, value in properties.items()]
    return "\n".join(lines) + "\n"


def default_config_file(properties: Mapping[str, str]) -> Path:
    """server.properties in the first log dir: the data volume, which the
    image's non-root user can write (unlike the image's own directories)."""
    dirs = properties.get("log.dirs") or properties.get("log.dir") or IMAGE_DEFAULTS["log.dirs"]
    return Path(dirs.split(",")[0].strip()) / CONFIG_FILE_NAME


def _storage_dirs(config) -> list[Path]:
    from broker.cli import _storage_dirs as dirs  # the directories `pybroker storage format` writes

    return dirs(config)


def prepare_storage(config_file: Path, environ: Mapping[str, str], *, image_base: bool, say: Callable[[str], None]) -> None:
    """Format the node's directories on first start; leave formatted ones alone."""
    try:
        config = load_config_file(config_file, warn=lambda message: None)  # pybroker start warns, once
    except ConfigError as exc:
        raise ContainerError(f"{config_file}: {exc}") from None
    multi_node = not config.single_node_quorum
    if multi_node and not config.explicit.keys() & {"node.id", "broker.id"}:
        # pybroker's default node.id is 1; every node of a cluster silently
        # taking that id would be far worse than refusing to start.
        raise ContainerError("KAFKA_NODE_ID is not set: every node of a multi-node cluster needs its own id")
    directories = _storage_dirs(config)
    for directory in directories:
        check_writable(directory)
    unformatted = [d for d in directories if not (d / META_PROPERTIES).exists()]
    if not unformatted:
        say(f"storage already formatted ({', '.join(map(str, directories))}); not formatting again")
        return
    cluster_id = environ.get(CLUSTER_ID_ENV) or None
    configured = config["cluster.id"]
    if cluster_id and configured and cluster_id != configured:
        raise ContainerError(f"CLUSTER_ID {cluster_id} and cluster.id {configured} differ")
    cluster_id = cluster_id or configured
    if cluster_id is None:
        if multi_node:
            raise ContainerError(
                "CLUSTER_ID is not set: the nodes of a multi-node cluster are formatted with one shared id "
                "(make one with 'pybroker storage random-uuid')"
            )
        # A quorum of one makes up its own id on first start (broker/app.py).
        say("no CLUSTER_ID: this single node makes up a cluster id on first start")
        return
    try:
        check_cluster_id(cluster_id)
        # ignore_formatted: a log dir added to a formatted node is formatted, the others kept.
        outcome = format_storage(directories, config.node_id, cluster_id, ignore_formatted=True)
    except MetaPropertiesError as exc:
        raise ContainerError(str(exc)) from None
    for directory, what in outcome:
        if what == "formatted":
            say(f"formatted {directory} with cluster.id {cluster_id} and node.id {config.node_id}")


def prepare(
    environ: Mapping[str, str],
    *,
    base_config: Path | None = None,
    config_file: Path | None = None,
    say: Callable[[str], None] = print,
) -> list[str]:
    """Write the node's config and format its storage; returns the argv to exec."""
    properties, image_base = merged_properties(environ, base_config)
    for name in ignored_variables(environ):
        say(f"{name} is a JVM/launcher setting, not a broker key; ignored")
    if config_file is None:
        config_file = default_config_file(properties)
        # The config goes into the data volume: its ownership is checked here first.
        check_writable(config_file.parent)
    config_file = Path(config_file)
    try:
        config_file.parent.mkdir(parents=True, exist_ok=True)
        config_file.write_text(render_properties(properties))
    except OSError as exc:
        raise ContainerError(f"cannot write {config_file}: {exc.strerror or exc}") from None
    prepare_storage(config_file, environ, image_base=image_base, say=say)
    # The interpreter running this module, so the broker is the same install
    # whatever PATH holds; `-m broker` is the `pybroker` command.
    return [sys.executable, "-m", "broker", "start", "--config", str(config_file)]


def config_file_of(environ: Mapping[str, str], base_config: Path | None, config_file: Path | None) -> Path:
    """Where the entrypoint writes (wrote) the node's config for this environment."""
    if config_file is not None:
        return Path(config_file)
    return default_config_file(merged_properties(environ, base_config)[0])


_WILDCARD_HOSTS = ("", "0.0.0.0", "::")


def healthcheck_listener(config) -> tuple[str, int, str, bool]:
    """(host, port, security protocol, whether it is a broker listener) to check the node on.

    A broker listener, PLAINTEXT first, else (controller-only node) a controller
    listener; a wildcard bind address is dialled on loopback."""
    candidates = config.broker_listeners
    broker = bool(candidates)
    if not broker:
        candidates = config.controller_listeners
    if not candidates:
        raise ContainerError("the node's config has no listener to check")
    plaintext = [l for l in candidates if config.security_protocol(l.name) == "PLAINTEXT"]
    listener = (plaintext or candidates)[0]
    host = "127.0.0.1" if listener.host in _WILDCARD_HOSTS else listener.host
    return host, listener.port, config.security_protocol(listener.name), broker


def healthcheck(config_file: Path, *, timeout_s: float, command_config: str | None = None) -> str:
    """One line saying the node is healthy; ContainerError (one line) when it is not."""
    from broker.tools.client import load_settings
    from broker.tools.groups import KafkaConnection, ToolError

    if not Path(config_file).exists():
        raise ContainerError(f"{config_file} does not exist: the node has not been started by the entrypoint")
    try:
        config = load_config_file(config_file, warn=lambda message: None)
    except ConfigError as exc:
        raise ContainerError(f"{config_file}: {exc}") from None
    host, port, protocol, broker = healthcheck_listener(config)
    if protocol != "PLAINTEXT" and not command_config:
        raise ContainerError(
            f"the listener on port {port} is {protocol}: set {HEALTHCHECK_CONFIG_ENV} to a client properties "
            "file for it (as --command-config), or disable the healthcheck"
        )
    try:
        settings = load_settings(command_config)
        if broker:
            from broker.cli import healthcheck as broker_healthcheck

            return broker_healthcheck(f"{host}:{port}", timeout_s, config.node_id, settings)
        connection = KafkaConnection(host, port, timeout_s, settings)
        try:
            versions = connection.call("ApiVersions", 0)
        finally:
            connection.close()
    except ToolError as exc:
        raise ContainerError(str(exc)) from None
    if versions.error_code != 0:
        raise ContainerError(f"controller {config.node_id} on {host}:{port} answered ApiVersions with error code {versions.error_code}")
    return f"{host}:{port} is healthy: controller {config.node_id} answers ApiVersions"


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None, execvp=os.execvp) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m broker.container",
        description="Configure a node from KAFKA_ environment variables (as the apache/kafka image does), "
        "format its storage on first start, then run it in the foreground.",
    )
    parser.add_argument("--base-config", metavar="FILE", help=f"the properties to start from (env {BASE_CONFIG_ENV})")
    parser.add_argument("--config-file", metavar="FILE", help=f"where to write the result (env {CONFIG_FILE_ENV})")
    parser.add_argument("--dry-run", action="store_true", help="prepare, print the command, do not run it")
    parser.add_argument(
        "--healthcheck", action="store_true",
        help="check the node the entrypoint started, on a listener of its config (the image's HEALTHCHECK); "
        "exit 0 when healthy, 1 otherwise",
    )
    parser.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS", help="--healthcheck's socket timeout")
    argv = sys.argv[1:] if argv is None else argv
    if argv and not argv[0].startswith("-"):
        # `docker run IMAGE pybroker storage random-uuid`: a command given to the
        # container runs instead of the node, as images conventionally allow.
        execvp(argv[0], argv)
        return 0
    args = parser.parse_args(argv)
    environ = os.environ if environ is None else environ
    base = args.base_config or environ.get(BASE_CONFIG_ENV) or None
    target = args.config_file or environ.get(CONFIG_FILE_ENV) or None
    say = lambda line: print(f"pybroker container: {line}", flush=True)  # noqa: E731
    base_config, config_file = (Path(base) if base else None), (Path(target) if target else None)
    if args.healthcheck:
        try:
            print(healthcheck(
                config_file_of(environ, base_config, config_file), timeout_s=args.timeout,
                command_config=environ.get(HEALTHCHECK_CONFIG_ENV) or None,
            ))
        except ContainerError as exc:
            print(f"pybroker healthcheck: {exc}", file=sys.stderr)
            return 1
        return 0
    try:
        command = prepare(environ, base_config=base_config, config_file=config_file, say=say)
    except ContainerError as exc:
        print(f"pybroker container: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.dry_run:
        print(" ".join(command))
        return 0
    sys.stdout.flush()
    execvp(command[0], command)  # does not return: the broker takes over this process
    return 0


if __name__ == "__main__":
    sys.exit(main())
