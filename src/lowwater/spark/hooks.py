"""What the engine calls after each committed step: injected from above, so the engine never imports observe.

The engine knows only :class:`StepHooks`: started when a run starts, told each
committed step (its ``metrics/`` row and the running totals), closed when the
run ends. By itself it calls ``hooks`` (callables a caller or a test adds);
the exporters and alert rules of ``[observe]``/``[alerts]`` are
``lowwater.observe.hub.Observers``, a subclass the top layer (``lowwater run``,
the demo) builds and hands to ``Engine(..., observers=...)``. A hook that
raises is logged once per kind of error and the run goes on: watching a
pipeline must never stop it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from lowwater.config import PipelineConfig

log = logging.getLogger("lowwater")

# A hook gets (step, metrics row, running totals, alert rule -> firing) of each committed step.
StepHook = Callable[[int, Mapping[str, Any], Mapping[str, int], Mapping[str, bool]], None]


class StepHooks:
    """The engine's observers when none are given: only ``hooks``; no exporter, no alert rule."""

    def __init__(self, cfg: PipelineConfig | None = None) -> None:
        self.cfg = cfg
        self.hooks: list[StepHook] = []
        self._warned: set[str] = set()

    def start(self, spark: Any = None, lw_dir: str | None = None, outputs: Any = None) -> None:
        """Called when a run starts: nothing to start, but say so if the configuration asks for exporters."""
        if self.cfg is None:
            return
        obs = self.cfg.observe
        asked = [name for name, on in (
            ("[alerts]", self.cfg.alerts is not None), ("observe.spark_progress", obs.spark_progress),
            ("observe.prometheus_port", obs.prometheus_port is not None),
            ("observe.prometheus_textfile", obs.prometheus_textfile is not None)) if on]
        if asked:
            log.warning("%s configured, but this Engine was given no observers: nothing is exported "
                        "(pass observers=lowwater.observe.hub.Observers(cfg), as lowwater run does)", ", ".join(asked))

    def on_step(self, step: int, row: Mapping[str, Any], totals: Mapping[str, int]) -> None:
        """Hand a committed step to every hook; log, never raise."""
        self.notify(self.hooks, step, row, totals, {})

    def notify(self, targets: Iterable[StepHook], step: int, row: Mapping[str, Any], totals: Mapping[str, int],
               alerts: Mapping[str, bool]) -> None:
        """Call each target in turn; one that raises is logged (once per kind of error), the others still run."""
        for target in targets:
            try:
                target(step, row, totals, alerts)
            except Exception as e:  # noqa: BLE001 - an observer must not fail the step
                who = getattr(target, "__qualname__", type(target).__name__)
                kind = f"{who}:{type(e).__name__}"
                if kind not in self._warned:
                    self._warned.add(kind)
                    log.warning("observer %s failed on step %d (the step is committed): %s", who, step, e)

    def close(self) -> None:
        """Called when a run ends (nothing to stop here)."""
