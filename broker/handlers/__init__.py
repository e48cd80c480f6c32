"""One module per API; each states the versions it serves and how it behaves.

``register_all`` is the broker's list of served APIs: what it registers is
what ApiVersions advertises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.app import Broker
    from broker.dispatch import Dispatcher


def register_all(dispatcher: "Dispatcher", broker: "Broker") -> None:
    from broker.handlers import (
        alter_configs,
        api_versions,
        create_topics,
        delete_records,
        delete_topics,
        describe_configs,
        fetch,
        find_coordinator,
        incremental_alter_configs,
        init_producer_id,
        list_offsets,
        metadata,
        produce,
    )

    for module in (
        api_versions,
        metadata,
        produce,
        fetch,
        list_offsets,
        create_topics,
        delete_topics,
        init_producer_id,
        find_coordinator,
        describe_configs,
        alter_configs,
        incremental_alter_configs,
        delete_records,
    ):
        module.register(dispatcher, broker)
