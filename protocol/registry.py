"""Every API and data message the protocol layer has declarations for.

Each module in :mod:`protocol.messages` exports ``APIS`` (a list of
:class:`~protocol.schema.Api`) and optionally ``DATA`` (a list of
:class:`~protocol.schema.DataMessage`). What the *broker* serves is a subset,
chosen in ``broker/``; this registry is what the codec can speak.
"""

from __future__ import annotations

import importlib
import pkgutil

from protocol import messages
from protocol.headers import REQUEST_HEADER, RESPONSE_HEADER
from protocol.schema import Api, DataMessage


def _collect() -> tuple[dict[int, Api], dict[str, DataMessage]]:
    apis: dict[int, Api] = {}
    data: dict[str, DataMessage] = {REQUEST_HEADER.name: REQUEST_HEADER, RESPONSE_HEADER.name: RESPONSE_HEADER}
    for info in sorted(pkgutil.iter_modules(messages.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{messages.__name__}.{info.name}")
        for api in getattr(module, "APIS", ()):
            if api.key in apis:
                raise RuntimeError(f"api key {api.key} declared twice ({apis[api.key].name}, {api.name})")
            apis[api.key] = api
        for message in getattr(module, "DATA", ()):
            data[message.name] = message
    return apis, data


APIS_BY_KEY, DATA_MESSAGES = _collect()
APIS_BY_NAME = {api.name: api for api in APIS_BY_KEY.values()}
