"""One module per API; each states the versions it serves and how it behaves.

``register_all`` is the broker's list of served APIs: what it registers is
what ApiVersions advertises.
"""

from __future__ import annotations

from broker.net.dispatch import Dispatcher


def register_all(dispatcher: Dispatcher, broker) -> None:
    """Register every API's handler; ``broker`` is the running broker.app.Broker
    (not imported: the application imports the handlers, never the reverse).
    The broker's client quotas (``broker.quotas``, made here when the broker has
    none) are the dispatcher's too: it throttles every API by them."""
    from broker.net.quotas import ClientQuotaManager

    if getattr(broker, "quotas", None) is None:
        broker.quotas = ClientQuotaManager(
            lambda: broker.image.client_quotas,
            num_samples=broker.config["quota.window.num"],
            sample_seconds=broker.config["quota.window.size.seconds"],
            mutation_samples=broker.config["controller.quota.window.num"],
            mutation_sample_seconds=broker.config["controller.quota.window.size.seconds"],
        )
    dispatcher.quotas = broker.quotas
    from broker.handlers import (
        acls,
        add_offsets_to_txn,
        add_partitions_to_txn,
        alter_configs,
        alter_partition_reassignments,
        api_versions,
        client_quotas,
        cluster_links,
        consumer_group_describe,
        consumer_group_heartbeat,
        create_partitions,
        create_topics,
        delete_groups,
        delete_records,
        delete_topics,
        describe_balancer,
        describe_cluster,
        describe_configs,
        describe_groups,
        describe_log_dirs,
        describe_mirrors,
        describe_multi_master,
        describe_producers,
        describe_quorum,
        describe_topic_partitions,
        describe_transactions,
        elect_leaders,
        end_txn,
        fetch,
        find_coordinator,
        heartbeat,
        incremental_alter_configs,
        init_producer_id,
        join_group,
        leave_group,
        list_groups,
        list_offsets,
        list_partition_reassignments,
        list_transactions,
        metadata,
        offset_commit,
        offset_delete,
        offset_fetch,
        offset_for_leader_epoch,
        produce,
        sasl,
        scram_credentials,
        share_fetch,
        share_group_describe,
        share_group_heartbeat,
        share_group_state,
        sync_group,
        txn_offset_commit,
        update_features,
        write_txn_markers,
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
        create_partitions,
        describe_cluster,
        describe_topic_partitions,
        describe_log_dirs,
        offset_for_leader_epoch,
        elect_leaders,
        alter_partition_reassignments,
        list_partition_reassignments,
        describe_balancer,
        describe_producers,
        describe_quorum,
        describe_mirrors,
        describe_multi_master,
        join_group,
        sync_group,
        heartbeat,
        leave_group,
        offset_commit,
        offset_fetch,
        offset_delete,
        list_groups,
        describe_groups,
        delete_groups,
        consumer_group_heartbeat,
        consumer_group_describe,
        share_group_heartbeat,
        share_group_describe,
        share_fetch,
        share_group_state,
        add_partitions_to_txn,
        add_offsets_to_txn,
        end_txn,
        txn_offset_commit,
        write_txn_markers,
        describe_transactions,
        list_transactions,
        sasl,
        scram_credentials,
        acls,
        client_quotas,
        cluster_links,
        update_features,
    ):
        module.register(dispatcher, broker)
