"""The broker's HTTP endpoints: Prometheus metrics, the web console, the REST proxy.

Each is off unless its listener key is set (``metrics.listener``,
``console.listener``, ``rest.listener``) and then bound when the broker starts,
right after its Kafka listeners, so a port in use stops the node at once as a
listener error. The REST proxy's module (aiohttp) is imported only when it is
configured. They stop after the Kafka listeners close.
"""

from __future__ import annotations

from broker.console import Console
from broker.console import unavailable_message as console_unavailable_message
from broker.metrics import BrokerMetrics
from broker.metrics import unavailable_message as metrics_unavailable_message


class EndpointUnavailable(Exception):
    """An endpoint's address cannot be bound; the message names its key and what to do."""


class HttpEndpoints:
    """Made by the Broker once its dispatchers exist; each endpoint is also the broker's
    attribute of that name (``broker.metrics``, ``broker.console``, ``broker.rest``: None
    when off), where the others read it (the console charts the metrics' counters)."""

    def __init__(self, broker):
        # metrics.listener: the Prometheus endpoint (broker/metrics.py), counting every dispatcher's requests.
        self.metrics = broker.metrics = BrokerMetrics.from_config(broker)
        if self.metrics is not None:
            self.metrics.instrument(broker.dispatcher, broker.controller_dispatcher)
        # console.listener: the web console (broker/console/).
        self.console = broker.console = Console.from_config(broker)
        # rest.listener: the REST proxy (broker/rest/).
        self.rest = broker.rest = None
        if broker.config["rest.listener"] is not None:
            from broker.rest.server import RestProxy

            self.rest = broker.rest = RestProxy.from_config(broker)

    async def start(self) -> None:
        """Bind and serve each configured endpoint; EndpointUnavailable when one cannot be bound."""
        if self.metrics is not None:
            # Served at once: a node still joining the quorum is worth watching too.
            try:
                await self.metrics.start()
            except OSError as exc:
                raise EndpointUnavailable(metrics_unavailable_message(self.metrics.listener, exc)) from None
        if self.console is not None:
            try:
                await self.console.start()
            except OSError as exc:
                raise EndpointUnavailable(console_unavailable_message(self.console.listener, exc)) from None
        if self.rest is not None:
            from broker.rest.server import unavailable_message as rest_unavailable_message

            try:
                await self.rest.start()
            except OSError as exc:
                raise EndpointUnavailable(rest_unavailable_message(self.rest.listener, exc)) from None

    async def stop(self) -> None:
        for endpoint in (self.metrics, self.console, self.rest):
            if endpoint is not None:
                await endpoint.stop()
