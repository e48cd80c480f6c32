"""KIP-848 consumer groups: the broker assigns, members reconcile by heartbeats.

Pure modules (no IO, no clock; every operation takes ``now_ms``): ``model``
(groups, members, subscription metadata), ``assignors`` (``uniform``,
``range``), ``reconciliation`` (a member's next assignment toward its target),
``records`` (the model as ``__consumer_offsets`` records and back) and
``coordinator`` (ConsumerGroupHeartbeat, timers, replay). Not wired into the
broker yet: no handler serves ConsumerGroupHeartbeat from these modules.
"""
