"""The REST proxy (``rest.listener``): Confluent REST Proxy v3 resources and v2 consumers, served by the broker.

``server.py`` is the HTTP side (aiohttp on the broker's event loop, basic auth,
Confluent's error shape), ``resources.py`` the v3 resources,
``cluster_resources.py`` the read-only v3 administration resources their links
lead to (ACLs, cluster-wide broker configs, replicas, reassignments),
``consumer_routes.py`` the v2 consumer API over ``consumer_instances.py`` (consumer
instances that are real group members) and ``consumer_client.py`` (an instance's
requests to its coordinator and its partitions' leaders), ``kafka.py`` the
in-process Kafka client they use (requests go through the broker's own
dispatcher, with the principal the HTTP request authenticated as),
``cluster.py`` what only another node can answer (partitions it leads, groups
it coordinates, its configs), sent to that node after authorizing the caller
here, and ``openapi.py`` the OpenAPI document made from the route table.
"""
