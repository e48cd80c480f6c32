"""The options and help texts every admin tool shares: ``--bootstrap-server``,
``--command-config FILE`` (Kafka client properties, broker/tools/client.py)
and ``--timeout``, and the exit-code sentence of their help."""

from __future__ import annotations

import argparse

from broker.tools.client import load_settings

EXIT_CODES = (
    "Exit code: 0; 1 when the broker refuses the request or what is named does not exist; "
    "2 on usage or connection errors."
)
COMMAND_CONFIG_HELP = (
    "a file of Kafka client properties: security.protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), "
    "ssl.truststore.location (PEM), ssl.keystore.location (PEM key+certificate), ssl.key.password, "
    "ssl.endpoint.identification.algorithm, sasl.mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), sasl.jaas.config"
)


def add_client_options(parser: argparse.ArgumentParser, timeout_s: float = 15.0, bootstrap_default: str | None = "localhost:9092") -> None:
    """--bootstrap-server (unless the tool declares its own), --command-config and --timeout."""
    if bootstrap_default is not None:
        parser.add_argument(
            "--bootstrap-server", default=bootstrap_default, metavar="HOST:PORT",
            help=f"a broker to ask (default {bootstrap_default})",
        )
    parser.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    parser.add_argument(
        "--timeout", type=float, default=timeout_s, metavar="SECONDS", help=f"socket timeout (default {timeout_s:g})"
    )


def settings_of(args):
    return load_settings(getattr(args, "command_config", None))
