"""One :class:`~broker.links.source.SourceCluster` per link for a task that reads sources.

A link's settings may change (AlterClusterLinks): the client made from the old
ones is closed and a new one made at the next use. A link whose settings
cannot be used gives the error instead of a client, so the caller can say so
once.
"""

from __future__ import annotations

import uuid

from broker.links.source import SourceCluster


class SourceClients:
    def __init__(self, client_id: str):
        self.client_id = client_id
        self._clients: dict[uuid.UUID, tuple[dict, SourceCluster]] = {}

    def for_link(self, link) -> SourceCluster:
        """The client of ``link`` (an image ClusterLink); SourceConfigError when its settings cannot be used."""
        configs = dict(link.configs)
        held = self._clients.get(link.link_id)
        if held is not None:
            if held[0] == configs:
                return held[1]
            held[1].close()
            del self._clients[link.link_id]
        client = SourceCluster(link.name, configs, client_id=self.client_id)  # SourceConfigError: the caller says it
        self._clients[link.link_id] = (configs, client)
        return client

    def keep_only(self, link_ids) -> None:
        """Close the clients of links that are gone (or no longer needed here)."""
        for link_id in set(self._clients) - set(link_ids):
            self._clients.pop(link_id)[1].close()

    def close(self) -> None:
        for _, client in self._clients.values():
            client.close()
        self._clients.clear()
