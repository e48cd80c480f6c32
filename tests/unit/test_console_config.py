"""console.listener is refused on a broker with an authorizer: its pages would bypass the ACLs."""

from __future__ import annotations

import pytest

from broker.config import STANDARD_AUTHORIZER, ConfigError, load_config


def test_console_with_an_authorizer_is_refused(tmp_path):
    base = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path), "console.listener": "http://127.0.0.1:0"}
    assert load_config(base, warn=lambda _: None)["console.listener"] is not None
    with pytest.raises(ConfigError, match="console.listener: the web console has no login"):
        load_config({**base, "authorizer.class.name": STANDARD_AUTHORIZER}, warn=lambda _: None)
    # Without the console, the authorizer alone is fine.
    config = load_config({k: v for k, v in base.items() if k != "console.listener"} | {"authorizer.class.name": STANDARD_AUTHORIZER}, warn=lambda _: None)
    assert config["console.listener"] is None
