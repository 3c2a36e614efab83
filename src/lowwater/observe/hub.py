"""The engine's one hook into observation: every committed step goes to each exporter, none can fail a step.

The top layer (``lowwater run``, the demo) builds :class:`Observers` and hands
it to ``Engine(..., observers=...)``: the engine knows only its base,
``spark/hooks.StepHooks``, and never imports this package. The engine calls
:meth:`Observers.on_step` after a step's manifest is committed, with the
step's ``metrics/`` row and the running totals. An exporter that raises is
logged (once per kind of error) and the run goes on: watching the pipeline
must never stop it. Exporters are started by :meth:`Observers.start` when a
run starts and stopped when it ends.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from lowwater.config import ConfigError, PipelineConfig
from lowwater.spark.hooks import StepHooks

log = logging.getLogger("lowwater")


class Exporter(Protocol):
    """What an exporter offers the hub."""

    def on_step(self, step: int, row: Mapping[str, Any], totals: Mapping[str, int],
                alerts: Mapping[str, bool]) -> None: ...
    def close(self) -> None: ...


def pipeline_name(cfg: PipelineConfig) -> str:
    """The ``pipeline`` label: ``[observe] pipeline``, else the output path."""
    return cfg.observe.pipeline or cfg.output.path


class Observers(StepHooks):
    """The exporters configured in ``[observe]``, plus ``hooks`` (callables a caller or a test adds)."""

    cfg: PipelineConfig

    def __init__(self, cfg: PipelineConfig) -> None:
        super().__init__(cfg)
        self.exporters: list[Exporter] = []
        self.prometheus = None
        self.alerting = None

    def start(self, spark: Any = None, lw_dir: str | None = None, outputs: Any = None) -> None:
        """Start the configured exporters (idempotent).

        Spark's progress needs the session and the state directory; the alerts
        are written as ``alerts/`` through ``outputs`` (the engine's Parquet outputs).
        """
        if self.exporters or self.alerting is not None:
            return
        obs = self.cfg.observe
        if self.cfg.alerts is not None:
            from lowwater.observe.alerting import ALERTS_ARROW, Alerting

            write = None
            if outputs is not None:
                from lowwater.spark.metrics import spark_schema_of

                spark_schema = spark_schema_of(ALERTS_ARROW)

                def write(step: int, table: Any) -> None:
                    outputs.write_rows("alerts", step, table, spark_schema)

            self.alerting = Alerting(self.cfg.alerts, pipeline_name(self.cfg), write)
        if obs.spark_progress and spark is not None and lw_dir is not None:
            from lowwater.observe.spark_progress import SparkProgress

            self.exporters.append(SparkProgress(spark, lw_dir, pipeline_name(self.cfg),
                                                obs.spark_progress_interval_us / 1e6))
        if obs.prometheus_port is not None or obs.prometheus_textfile is not None:
            from lowwater.observe.prometheus import PrometheusExporter

            several = len(self.cfg.sources) > 1
            try:
                self.prometheus = PrometheusExporter(obs.prometheus_port, pipeline_name(self.cfg),
                                                     obs.prometheus_host, source=self.cfg.sources[0].name,
                                                     several=several, textfile=obs.prometheus_textfile)
            except OSError as e:
                msg = f"observe.prometheus_port: cannot serve on {obs.prometheus_host}:{obs.prometheus_port}: {e}"
                raise ConfigError(msg) from None
            self.exporters.append(self.prometheus)

    def on_step(self, step: int, row: Mapping[str, Any], totals: Mapping[str, int]) -> None:
        """Hand a committed step to every exporter, then every hook; log, never raise."""
        alerts: dict[str, bool] = {}
        if self.alerting is not None:
            try:
                self.alerting.on_step(step, row)
            except Exception as e:  # noqa: BLE001 - alerting must not fail the step
                log.warning("alert rules failed on step %d (the step is committed): %s", step, e)
            alerts = self.alerting.firing
        self.notify((*(e.on_step for e in self.exporters), *self.hooks), step, row, totals, alerts)

    def close(self) -> None:
        """Stop every exporter (idempotent)."""
        for e in self.exporters:
            try:
                e.close()
            except Exception as err:  # noqa: BLE001
                log.warning("could not stop %s: %s", type(e).__name__, err)
        self.exporters = []
        self.prometheus = None
        if self.alerting is not None:
            self.alerting.close()
            self.alerting = None
