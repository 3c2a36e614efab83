"""``whatif`` / ``delays`` on a terminal: Spark's active stages as live bars (observe/jobs.py)."""

from __future__ import annotations

import io
import threading
import time

import pytest
from rich.console import Console

from lowwater.cli.app import job_progress
from lowwater.observe.jobs import SparkJobProgress, stage_label

pytestmark = pytest.mark.spark


def _slow(batches):  # noqa: ANN001, ANN202 - mapInPandas: each task takes ~0.6 s, so the stage is seen running
    for b in batches:
        time.sleep(0.6)
        yield b


def test_the_bars_follow_a_running_stage_to_its_end(spark):
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    df = spark.range(0, 8, numPartitions=4).mapInPandas(_slow, "id long")
    with SparkJobProgress(spark, console, "what-if over landing: 2 bound(s)", interval_s=0.1) as bars:
        done = threading.Event()
        threading.Thread(target=lambda: (df.count(), done.set()), daemon=True).start()
        assert done.wait(120)
        bars.update()
    running = [s for s in bars.seen if s.tasks == 4]
    assert running, f"the 4-task stage was never seen running: {bars.seen}"
    assert all(0 <= s.done <= s.tasks for s in bars.seen)
    sid = running[0].stage_id
    task = bars.progress.tasks[bars.bars[sid]]
    assert (task.completed, task.total) == (4, 4)  # finished when it left the active stages
    text = buf.getvalue()
    assert "what-if over landing" in text and f"stage {sid}: " in text


def test_not_on_a_terminal_or_quiet_there_are_no_bars(spark):
    with job_progress(spark, "x", quiet=True) as bars:
        assert bars is None
    with job_progress(spark, "x", quiet=False) as bars:  # pytest's stderr is not a terminal
        assert bars is None


def test_stage_label_drops_the_call_site():
    assert stage_label("collect at /x/whatif.py:119") == "collect"
    assert stage_label("mapInArrow") == "mapInArrow"
