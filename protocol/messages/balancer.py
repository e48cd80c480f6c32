"""pybroker's own APIs for the balancer of the active controller (keys 16010-16011).

Apache Kafka has no balancer (Confluent's Self-Balancing Clusters answer a
similar question through their own admin API), so this one is pybroker's, in
the private range above Kafka's keys that the cluster link APIs started
(protocol/messages/cluster_links.py). The active controller answers it; a
broker forwards it there, as it forwards ListPartitionReassignments.

``state`` is ``off``, ``ready``, ``in_progress`` or ``stalled``; ``reason``
says why it is stalled (or what a ready balancer waits for). Sizes and times
the controller does not know are -1 (until the brokers have reported their
replicas' sizes in their heartbeats). With ``include_plan``, the answer also
carries the plan the balancer would make now (a dry run: nothing is
started). ``broker_loads`` has a line per registered broker: its replicas,
the partitions it leads, and what it last reported (-1 when it has not
reported to this controller yet).

AlterBrokerPlacements (16011) cordons brokers (no new replicas), drains them
(remove-broker: the balancer moves every replica off) or puts them back to
normal; the active controller writes the states to the metadata log
(controller/balancer/placement_commands.py says what is refused).
"""

from protocol.schema import BOOL, INT16, INT32, INT64, STRING, Api, Array, F, Struct

APIS = [
    Api(
        16010, "DescribeBalancerStatus", "0", flexible="0+",
        request=[
            F("include_plan", BOOL),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+", default=None),
            F("state", STRING),
            F("reason", STRING, nullable="0+", default=None),
            # What the running (or last) plan was made for: node_add, broker_failure, imbalance, cluster_changed.
            F("trigger", STRING, nullable="0+", default=None),
            F("moves_in_flight", INT32),
            # Of the moves in flight, as planned; the estimate is the running plan's, from its start.
            F("bytes_to_move", INT64, default=-1),
            F("estimated_ms", INT64, default=-1),
            # Wall-clock time a plan last found nothing to move (-1: not since this controller became active).
            F("balanced_since_ms", INT64, default=-1),
            # Brokers fenced for longer than the failure threshold that still hold replicas.
            F("failed_brokers", Array(INT32)),
            F("plan_included", BOOL, default=False),
            F("planned_moves", Array(Struct("PlannedMove", [
                F("topic", STRING),
                F("partition_index", INT32),
                F("current_replicas", Array(INT32)),
                F("target_replicas", Array(INT32)),
                # leader_only (the same replicas, another preferred leader) or replica_move.
                F("kind", STRING),
                F("bytes_to_move", INT64, default=-1),
            ]))),
            F("plan_bytes_to_move", INT64, default=-1),
            F("plan_estimated_ms", INT64, default=-1),
            # The bound on moves per broker held moves back: a next plan makes more.
            F("plan_cost_bound_reached", BOOL, default=False),
            # Hard goals the plan cannot meet as the cluster stands, each said in a sentence.
            F("plan_violations", Array(STRING)),
            # Brokers that are cordoned or draining, with the replicas they still hold.
            F("broker_placements", Array(Struct("BrokerPlacement", [
                F("broker_id", INT32),
                F("state", STRING),
                F("replicas", INT32),
            ]))),
            F("broker_loads", Array(Struct("BrokerLoad", [
                F("broker_id", INT32),
                F("replicas", INT32),
                F("leaders", INT32),
                F("disk_used_bytes", INT64, default=-1),
                F("disk_capacity_bytes", INT64, default=-1),
                F("bytes_in_per_second", INT64, default=-1),
                F("bytes_out_per_second", INT64, default=-1),
            ]))),
            # The per-broker distribution when the current or last balancing run started
            # (its first plan; the console's "before"): none and -1 until this controller has started one.
            F("distribution_before_ms", INT64, default=-1),
            F("distribution_before", Array(Struct("BrokerShareBefore", [
                F("broker_id", INT32),
                F("replicas", INT32),
                F("leaders", INT32),
            ]))),
        ],
    ),
    Api(
        16011, "AlterBrokerPlacements", "0", flexible="0+",
        request=[
            F("brokers", Array(Struct("BrokerPlacementChange", [
                F("broker_id", INT32),
                # normal, cordoned or draining.
                F("state", STRING),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+", default=None),
            F("results", Array(Struct("BrokerPlacementResult", [
                F("broker_id", INT32),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
            ]))),
        ],
    ),
]
