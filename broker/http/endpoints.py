"""The broker's HTTP endpoints: Prometheus metrics, the web console, the REST proxy, the schema registry.

Each is off unless its listener key is set (``metrics.listener``,
``console.listener``, ``rest.listener``, ``schema.registry.listener``) and then bound when the broker starts,
right after its Kafka listeners, so a port in use stops the node at once as a
listener error. They stop after the Kafka listeners close.

All three are aiohttp applications with the same limits (broker/http/server.py).
Each endpoint's module, and so aiohttp, is imported only when it is configured.
"""

from __future__ import annotations

import errno
import os


class EndpointUnavailable(Exception):
    """An endpoint's address cannot be bound; the message names its key and what to do."""


def unavailable_message(key: str, listener, exc: OSError) -> str:
    """One line for an endpoint whose address cannot be bound, like the Kafka listeners'."""
    advice = {
        errno.EADDRINUSE: f"another process uses that port: stop it or give {key} another port",
        errno.EADDRNOTAVAIL: f"that address is not one of this host's: give {key} one that is (or 0.0.0.0)",
        errno.EACCES: f"ports below 1024 need privileges: give {key} a higher port",
    }.get(exc.errno, f"check {key}")
    reason = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else (exc.strerror or exc)
    return f"cannot listen on {listener} ({key}): {reason}; {advice}"


class HttpEndpoints:
    """Made by the Broker once its dispatchers exist; each endpoint is also the broker's
    attribute of that name (``broker.metrics``, ``broker.console``, ``broker.rest``: None
    when off), where the others read it (the console charts the metrics' counters)."""

    def __init__(self, broker):
        config = broker.config
        # Each endpoint's module is imported when it is configured: they import aiohttp.
        # metrics.listener: the Prometheus endpoint (broker/http/metrics.py), counting every dispatcher's requests.
        self.metrics = broker.metrics = None
        if config["metrics.listener"] is not None:
            from broker.http.metrics import BrokerMetrics

            self.metrics = broker.metrics = BrokerMetrics.from_config(broker)
            self.metrics.instrument(broker.dispatcher, broker.controller_dispatcher)
        # console.listener: the web console (broker/http/console/).
        self.console = broker.console = None
        if config["console.listener"] is not None:
            from broker.http.console import Console

            self.console = broker.console = Console.from_config(broker)
        # rest.listener: the REST proxy (broker/http/rest/).
        self.rest = broker.rest = None
        if config["rest.listener"] is not None:
            from broker.http.rest.server import RestProxy

            self.rest = broker.rest = RestProxy.from_config(broker)
        # schema.registry.listener: the schema registry's API (broker/http/schema_registry.py).
        self.schema_registry = None
        if config["schema.registry.listener"] is not None:
            from broker.http.schema_registry import SchemaRegistryApi

            self.schema_registry = SchemaRegistryApi(broker)

    async def start(self) -> None:
        """Bind and serve each configured endpoint; EndpointUnavailable when one cannot be bound."""
        if self.metrics is not None:
            # Served at once: a node still joining the quorum is worth watching too.
            try:
                await self.metrics.start()
            except OSError as exc:
                raise EndpointUnavailable(unavailable_message("metrics.listener", self.metrics.listener, exc)) from None
        if self.console is not None:
            try:
                await self.console.start()
            except OSError as exc:
                raise EndpointUnavailable(unavailable_message("console.listener", self.console.listener, exc)) from None
        if self.rest is not None:
            try:
                await self.rest.start()
            except OSError as exc:
                raise EndpointUnavailable(unavailable_message("rest.listener", self.rest.listener, exc)) from None
        if self.schema_registry is not None:
            try:
                await self.schema_registry.start()
            except OSError as exc:
                raise EndpointUnavailable(
                    unavailable_message("schema.registry.listener", self.schema_registry.listener, exc)
                ) from None

    async def stop(self) -> None:
        for endpoint in (self.metrics, self.console, self.rest, self.schema_registry):
            if endpoint is not None:
                await endpoint.stop()
