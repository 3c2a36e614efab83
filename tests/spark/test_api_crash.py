"""``lw.foreach_batch`` across a SIGKILL: the user's own table after a crash and a restart equals a clean run's.

The driver is a user's script (the Python API over ``spark.readStream.json``) in a process of its own,
killed with ``LOWWATER_FAULT=before_commit:1:sigkill`` after step 1's callback has run and before the
step commits. The restart (the same script, in this process) replays Spark's batch 1 as step 1, so the
callback sees step 1 again, with the same rows; it replaces what it wrote for that step id, so its table
ends equal to that of a run without the crash.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from .helpers import fast_jvm
from .test_kafka import stream

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCRIPT = textwrap.dedent('''
    import sys
    from pathlib import Path

    from pyspark.sql import SparkSession, functions as F

    import lowwater as lw

    SCHEMA = "partition INT, offset LONG, arrival_time LONG, event_time LONG, key STRING, amount DOUBLE"


    def main(landing: str, root: Path) -> None:
        spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())

        def my_table(batch) -> None:  # the user's sink: one directory per step id, replaced when replayed
            with open(root / "calls.txt", "a") as f:
                f.write(f"{batch.step}\\n")
            batch.results.write.mode("overwrite").parquet(str(root / "table" / f"step={batch.step}"))

        df = spark.readStream.option("maxFilesPerTrigger", 1).schema(SCHEMA).json(landing)
        query = (lw.stream(df, event_time="event_time", partition="partition", offset="offset",
                           arrival="arrival_time", time_unit="ms")
                 .watermark(lw.bounded("2s").with_idleness("5s"))
                 .window(lw.tumbling("5s"), key="key")
                 .agg(total=F.sum("amount"))
                 .write(lw.parquet(root / "out"), lw.foreach_batch(my_table))
                 .start(drain=True))
        query.await_termination()


    if __name__ == "__main__":
        main(sys.argv[1], Path(sys.argv[2]))
''')


def land(landing: Path, rows: list[dict], files: int = 3) -> None:
    """``rows`` in ``files`` JSONL files, modified in name order (Spark's file source reads by modification time)."""
    landing.mkdir(parents=True)
    per = -(-len(rows) // files)
    for i in range(files):
        path = landing / f"part-{i:03d}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows[i * per:(i + 1) * per]))
        os.utime(path, (1_700_000_000 + i * 10, 1_700_000_000 + i * 10))


def table(root: Path) -> pd.DataFrame:
    t = pd.read_parquet(root / "table")
    t["step"] = t["step"].astype(int)
    return t.sort_values(["step", "key", "window_start", "kind", "revision"], ignore_index=True)


def calls(root: Path) -> list[int]:
    return [int(x) for x in (root / "calls.txt").read_text().split()]


def test_a_foreach_batch_table_after_sigkill_and_restart_equals_a_clean_run(spark, tmp_path):  # noqa: ARG001
    land(tmp_path / "landing", stream(240))
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    crashed, clean = tmp_path / "crashed", tmp_path / "clean"
    crashed.mkdir()
    clean.mkdir()
    env = fast_jvm({**os.environ, "PYSPARK_PYTHON": sys.executable, "LOWWATER_FAULT": "before_commit:1:sigkill"})
    run = subprocess.Popen([sys.executable, str(script), str(tmp_path / "landing"), str(crashed)], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    # The reference while that process starts its JVM: the same script, uninterrupted, in this process.
    namespace: dict = {"__name__": "job"}
    exec(compile(SCRIPT, str(script), "exec"), namespace)  # noqa: S102 - the user's script above
    namespace["main"](str(tmp_path / "landing"), clean)
    _, err = run.communicate(timeout=300)
    assert run.returncode == -signal.SIGKILL, err.decode()[-2000:]
    assert calls(crashed) == [0, 1]  # step 1's callback ran; then the kill, before the step committed

    namespace["main"](str(tmp_path / "landing"), crashed)  # the restart: the same script again
    steps = calls(clean)
    assert steps == list(range(len(steps))) and len(steps) >= 4  # three files a step each, then the drain
    assert calls(crashed) == [0, 1, *steps[1:]]  # step 1 again (Spark's batch 1 replayed), then the rest
    pd.testing.assert_frame_equal(table(crashed), table(clean))
    assert len(table(clean)) > 0 and set(table(clean)["kind"]) == {"final"}
