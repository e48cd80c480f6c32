"""KIP-848 consumer groups: the broker assigns, members reconcile by heartbeats.

Pure modules (no IO, no clock; every operation takes ``now_ms``): ``model``
(groups, members, subscription metadata), ``assignors`` (``uniform``,
``range``), ``reconciliation`` (a member's next assignment toward its target),
``records`` (the model as ``__consumer_offsets`` records and back) and
``coordinator`` (ConsumerGroupHeartbeat, timers, replay) and ``classic_members``
(the online upgrade: classic members inside a consumer group). The group service
(broker/coordinators/groups/service.py) runs the coordinator beside the
classic one; broker/handlers/consumer_group_heartbeat.py and
consumer_group_describe.py serve it.
"""
