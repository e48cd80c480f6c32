"""What the Spark tests share besides the session."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import BrokerProcess


def stopped_log_dir(broker: BrokerProcess) -> Path:
    """Stop ``broker`` cleanly and return its log dir.

    The data source reads up to the high watermarks in
    ``replication-offset-checkpoint`` by default, which a running broker
    rewrites only every ``replica.high.watermark.checkpoint.interval.ms``
    (5 s); a clean shutdown writes them as they are, so a test reads every
    record it produced without waiting.
    """
    assert broker.stop() == 0, broker.log_text()[-3000:]
    return broker.data_dir / "logs"
