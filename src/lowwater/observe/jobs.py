"""Progress of a batch analysis on a terminal: Spark's own stages, live, as ``rich`` bars.

``lowwater whatif`` (and ``delays``) is one Spark batch job, not a sequence of
steps, so there is no step to report after; what a user waiting on it wants
to know is what it reads and how far Spark got. Spark already knows the
second: its status tracker (``SparkContext.statusTracker()``, the API behind
the Spark UI's stage table) gives every active stage's completed and total
tasks. A thread polls it and keeps one bar per stage, so the terminal shows
"reading and sorting the log 12/16 tasks" and then "replaying the log 0/1"
while the replay runs; elsewhere (not a terminal, ``--quiet``) nothing
changes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


@dataclass(frozen=True)
class StageSnapshot:
    """One active Spark stage as the status tracker reports it."""

    stage_id: int
    name: str
    tasks: int
    done: int


def stage_label(name: str) -> str:
    """A stage's call site as Spark names it (``collect at whatif.py:119``) without the noise."""
    return name.split(" at ", 1)[0] if " at " in name else name


class SparkJobProgress:
    """A context manager: a headline (what runs) and one bar per Spark stage while it runs."""

    def __init__(self, spark, console: Console, headline: str, interval_s: float = 0.5) -> None:  # noqa: ANN001
        self.tracker = spark.sparkContext.statusTracker()
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=False)
        self.headline = self.progress.add_task(headline, total=None)
        self.interval_s = interval_s
        self.bars: dict[int, int] = {}  # stage id -> rich task id
        self.seen: list[StageSnapshot] = []  # every snapshot taken (tests read it)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="lowwater-job-progress", daemon=True)

    def active_stages(self) -> list[StageSnapshot]:
        """The stages running now (the status tracker forgets none while they run)."""
        out = []
        for sid in sorted(self.tracker.getActiveStageIds()):
            info = self.tracker.getStageInfo(sid)
            if info is not None:
                out.append(StageSnapshot(sid, info.name, info.numTasks, info.numCompletedTasks))
        return out

    def update(self) -> None:
        """Take one snapshot: a new bar for a new stage, a finished bar for a stage gone."""
        now = self.active_stages()
        self.seen.extend(now)
        active = {s.stage_id for s in now}
        for s in now:
            if s.stage_id not in self.bars:
                self.bars[s.stage_id] = self.progress.add_task(f"stage {s.stage_id}: {stage_label(s.name)}",
                                                               total=s.tasks)
            self.progress.update(self.bars[s.stage_id], completed=s.done, total=s.tasks)
        for sid, task in self.bars.items():
            if sid not in active:
                t = self.progress.tasks[task]
                self.progress.update(task, completed=t.total or t.completed)

    def _poll(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.update()
            except Exception:  # noqa: BLE001 - a display must never fail the analysis
                return

    def __enter__(self) -> SparkJobProgress:
        self.progress.start()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for task in self.bars.values():  # what ran to the end is done
            t = self.progress.tasks[task]
            self.progress.update(task, completed=t.total or t.completed)
        self.progress.update(self.headline, total=1, completed=1)
        self.progress.stop()
