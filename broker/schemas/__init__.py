"""The schema registry: Confluent Schema Registry's API served by every broker, its schemas in ``_schemas``.

``formats.py`` reads and compares schemas (pure; one module per format:
``avro_format.py``, ``json_format.py``, ``protobuf_format.py`` with
``protobuf_compatibility.py``); ``records.py`` is the ``_schemas`` record
codec and ``state.py`` the registry replayed from those records (both pure);
``service.py`` is the asyncio shell over the internal topic (the partition's
leader writes, every broker reads). The HTTP API is
``broker/http/schema_registry.py``.
"""
