"""Registered schemas' formats, sans-IO: what the schema registry stores and what serializers write.

``formats.py`` reads and compares schemas (one module per format:
``avro_format.py``, ``json_format.py``, ``protobuf_format.py`` with
``protobuf_compatibility.py``; ``parsed_schema.py`` their shared types) and
decodes payloads; ``framing.py`` is Confluent's magic byte and schema id in
front of a payload; ``records.py`` the ``_schemas`` topic's keys and values.
Here rather than in broker/schemas/ because the Spark reader decodes values
by the registry's schemas and may import only the protocol and storage layers.
"""
