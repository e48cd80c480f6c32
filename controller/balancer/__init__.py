"""The cluster balancer's planning: pure, sync, no IO and no clock.

``model`` holds the planner's input (brokers and partitions with their loads, the
goal configuration) and its output (a ``Plan`` of moves); ``goals`` measures how
far a cluster is from each goal; ``planner`` makes the plan; ``image_input`` builds
the input from a metadata image. Nothing here carries a plan out: that is the
controller's reassignment's job.
"""
