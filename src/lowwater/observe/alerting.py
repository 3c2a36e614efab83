"""Alerts in a run: the core rules (``core/alerts.py``) fed from each step's ``metrics/`` row, and where they go.

Every firing and resolving is a log line (warning / info), a row in
``alerts/`` (Parquet, one directory per step like the other outputs), the
``lowwater_alert_firing{rule}`` gauge (the hub hands :attr:`Alerting.firing`
to the Prometheus exporter) and, with ``[alerts] webhook``, a JSON POST
(``observe/webhook.py``: never blocks the step).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from lowwater.config.observe import AlertsConfig
from lowwater.core.alerts import AlertState, StepFigures, Transition
from lowwater.observe.webhook import Webhook

log = logging.getLogger("lowwater")

ALERTS_ARROW = pa.schema([
    ("step", pa.int64()),
    ("spark_batch", pa.int64()),
    ("at", pa.timestamp("us", tz="UTC")),
    ("rule", pa.string()),
    ("state", pa.string()),  # firing | resolved
    ("message", pa.string()),
    ("value", pa.float64()),
    ("threshold", pa.float64()),
    ("pipeline", pa.string()),
])

# (step, table) -> None: writes the step's alert rows (the engine's Parquet outputs, ``alerts/batch_id=N``).
AlertWriter = Callable[[int, pa.Table], None]


def step_figures(step: int, row: Mapping[str, Any], now_us: int) -> StepFigures:
    """What the rules read of a step's ``metrics/`` row."""
    return StepFigures(
        step=step,
        now_us=now_us,
        lag_s=row.get("watermark_lag_s"),
        rows=row.get("rows") or 0,
        dead_letter=row.get("dead_letter") or 0,
        too_late=row.get("too_late") or 0,
        spread_s=row.get("spread_s"),
        idle=frozenset(row.get("idle_partitions") or ()),
        holding=row.get("holding_partition"),
        regressions=row.get("regressions") or 0,
    )


class Alerting:
    """Evaluates the rules after each step and reports every transition (see the module docstring)."""

    def __init__(self, cfg: AlertsConfig, pipeline: str, write: AlertWriter | None = None,
                 clock: Callable[[], int] = lambda: time.time_ns() // 1000) -> None:
        self.state = AlertState(cfg.rules)
        self.pipeline = pipeline
        self.write = write
        self.clock = clock
        self.webhook = Webhook(cfg.webhook, cfg.webhook_timeout_s, cfg.webhook_retries) if cfg.webhook else None
        self.history: list[Transition] = []

    @property
    def firing(self) -> dict[str, bool]:
        return dict(self.state.firing)

    def on_step(self, step: int, row: Mapping[str, Any]) -> list[Transition]:
        """Evaluate the rules on a committed step; report and return the transitions."""
        now_us = self.clock()
        changed = self.state.evaluate(step_figures(step, row, now_us))
        if not changed:
            return changed
        at = datetime.fromtimestamp(now_us / 1e6, UTC)
        rows = []
        for t in changed:
            state = "firing" if t.firing else "resolved"
            (log.warning if t.firing else log.info)("alert %s %s at step %d: %s", t.rule, state, step, t.message)
            record = {"step": step, "spark_batch": row.get("spark_batch"), "at": at, "rule": t.rule,
                      "state": state, "message": t.message, "value": t.value, "threshold": t.threshold,
                      "pipeline": self.pipeline}
            rows.append(record)
            if self.webhook is not None:
                self.webhook.post(record | {"at": at.isoformat()})
        self.history.extend(changed)
        if self.write is not None:
            self.write(step, pa.Table.from_pylist(rows, ALERTS_ARROW))
        return changed

    def close(self) -> None:
        if self.webhook is not None:
            self.webhook.close()
