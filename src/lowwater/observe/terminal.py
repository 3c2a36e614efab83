"""Progress on a terminal: one live ``rich`` line per run, updated after every step.

Shown by ``lowwater run`` when stderr is a terminal (and not ``--quiet``);
elsewhere the per-step log lines stay as they are (they name the partition
holding ``W`` back and the idle ones). The line says what a new user asks
first: how far the run got (steps, rows), where ``W`` is and who holds it,
how many rows come too late, how long a step takes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from lowwater.observe.model import late_rate
from lowwater.time import format_ts


def status_line(step: int, row: Mapping[str, Any], totals: Mapping[str, int], alerts: Mapping[str, bool]) -> str:
    """The status of a run after ``step`` (plain text: it carries user names, never markup)."""
    w = row.get("low_watermark")
    w_text = "undefined" if w is None else format_ts(int(w.timestamp() * 1_000_000))
    rate = late_rate(row)
    holding = row.get("holding_partition")
    idle = ", ".join(row.get("idle_partitions") or ())
    firing = ", ".join(r for r, on in alerts.items() if on)
    parts = [
        f"step {step}",
        f"{totals.get('rows', 0):,} rows ({totals.get('too_late', 0):,} too late)",
        f"W {w_text}" + (f" held by {holding}" if holding else ""),
        f"late rate {rate:.2%}" if rate is not None else "late rate -",
        f"{row.get('duration_s') or 0:.2f}s/step",
    ]
    if idle:
        parts.append(f"idle: {idle}")
    if firing:
        parts.append(f"ALERT: {firing}")
    return " | ".join(parts)


class TerminalProgress:
    """A live status line (a hook for ``Observers.hooks``); use as a context manager around the run."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False),
                                 TimeElapsedColumn(), console=console, transient=False)
        self.task = self.progress.add_task("waiting for the first step", total=None)
        self.last = ""

    def __call__(self, step: int, row: Mapping[str, Any], totals: Mapping[str, int],
                 alerts: Mapping[str, bool]) -> None:
        self.last = status_line(step, row, totals, alerts)
        self.progress.update(self.task, description=Text(self.last).plain)

    def __enter__(self) -> TerminalProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()
