"""The schema registry: Confluent Schema Registry's API served by every broker, its schemas in ``_schemas``.

The formats, Confluent's framing and the ``_schemas`` record codec are sans-IO
and live in protocol/schema_formats/. Here: ``state.py``, the registry replayed
from those records (pure); ``service.py``, the asyncio shell over the internal
topic (the partition's leader writes, every broker reads); validation on
produce (``validation_rules.py`` pure, ``validation.py`` over the state). The
HTTP API is ``broker/http/schema_registry.py``.
"""
