"""The REST proxy (``rest.listener``): Confluent REST Proxy v3 resources served by the broker.

``server.py`` is the HTTP side (aiohttp on the broker's event loop, basic auth,
Confluent's error shape), ``resources.py`` the v3 resources, ``kafka.py`` the
in-process Kafka client they use (requests go through the broker's own
dispatcher, with the principal the HTTP request authenticated as),
``cluster.py`` what only another node can answer (partitions it leads, groups
it coordinates, its configs), sent to that node after authorizing the caller
here, and ``openapi.py`` the OpenAPI document made from the route table.
"""
