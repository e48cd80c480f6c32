"""The ``pybroker`` command line.

``pybroker start --config FILE [--override key=value ...]`` runs a broker until
SIGTERM or SIGINT, then shuts down cleanly: listeners close, requests already
received are answered, logs are flushed and closed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from broker.config import ConfigError, load_config, load_config_file
from storage.meta_properties import MetaPropertiesError

log = logging.getLogger("pybroker")


def _parse_overrides(pairs: list[str]) -> dict[str, str]:
    overrides = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--override expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        overrides[key.strip()] = value
    return overrides


async def _run(config) -> None:
    from broker.app import Broker

    broker = Broker(config)
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    host, port = broker.advertised_endpoint()
    # Tests and scripts wait for this line to know the broker is serving.
    print(f"pybroker started: node.id={broker.node_id} cluster.id={broker.cluster_id} listening on {host}:{port}", flush=True)
    await stop.wait()
    log.info("shutting down")
    await broker.stop()
    print("pybroker stopped", flush=True)


def _install_event_loop() -> None:
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def cmd_start(args) -> int:
    overrides = _parse_overrides(args.override or [])
    if args.config:
        config = load_config_file(Path(args.config), overrides)
    else:
        config = load_config(overrides, base_dir=Path.cwd())
    if not args.no_uvloop:
        _install_event_loop()
    asyncio.run(_run(config))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pybroker", description="A Kafka-compatible broker.")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start", help="run a broker")
    start.add_argument("--config", "-c", help="a server.properties file")
    start.add_argument(
        "--override", "-o", action="append", metavar="KEY=VALUE", help="set a config key, overriding the file (repeatable)"
    )
    start.add_argument("--no-uvloop", action="store_true", help="use the standard asyncio event loop")
    start.set_defaults(func=cmd_start)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return args.func(args)
    except (ConfigError, MetaPropertiesError) as exc:
        print(f"pybroker: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
