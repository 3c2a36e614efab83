"""Clean stops and visible starts: Ctrl-C / SIGTERM on a continuous ``lowwater run``, then a restart.

One ``lowwater run`` process (a JVM start), in a process group of its own as under a service
manager: a continuous run that first waits for files and is stopped mid-stream with SIGTERM sent to
the whole process group (its JVM gets it too). Then, in this process on the shared session (a JVM
start each less): a continuous resume (``-q``) stopped, once caught up, with SIGINT sent to this
process (the CLI's handler is what a process has), and ``--once --drain``, whose outputs must equal
an uninterrupted run's. ``-q``'s silenced Spark banner in a real process is test_cli's subject.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from lowwater.config import load_config
from lowwater.spark.engine import Engine

from .helpers import fast_jvm, run_cli_here
from .test_crash import land_many

pytestmark = [pytest.mark.spark, pytest.mark.slow]

FILES, ROWS_PER_FILE = 3, 500  # steps 0-2: SIGTERM during step 1, the resume reads step 2


def _start(root: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    err = root / f"stderr-{time.monotonic_ns()}.txt"
    env = fast_jvm({**os.environ, "PYSPARK_PYTHON": sys.executable})
    with err.open("w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "lowwater.cli", "run", "pipeline.toml", *args], cwd=root,
                                env=env, stdout=subprocess.PIPE, stderr=f, start_new_session=True)
    return proc, err


def _children(pid: int) -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _ppid(p) == pid]


def _ppid(proc_dir: Path) -> int | None:
    try:
        return int((proc_dir / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _term_ignored(pids: list[int]) -> bool:
    """Some child (the JVM: spark-submit execs java) ignores SIGTERM (SigIgn in /proc/PID/status)."""
    for pid in pids:
        try:
            ign = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("SigIgn"))
        except (OSError, StopIteration):
            continue
        if int(ign.split()[1], 16) & (1 << (signal.SIGTERM - 1)):
            return True
    return False


def _newest(root: Path) -> int:
    state = root / "out" / "_checkpoint" / "lowwater" / "state"
    return max((int(p.name[9:21]) for p in state.glob("manifest-*.json")), default=-1)


def _wait(cond, what: str, proc: subprocess.Popen, err: Path, timeout: float = 240) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not cond():
        assert proc.poll() is None, f"exited {proc.returncode} before {what}: {err.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {err.read_text()[-3000:]}"
        time.sleep(0.1)


def _stop_group(proc: subprocess.Popen, err: Path, sig: signal.Signals) -> tuple[str, str]:
    """``sig`` to the run's whole process group (the driver and its JVM), as `kill -TERM -PGID` or systemd does."""
    os.killpg(proc.pid, sig)
    stdout, _ = proc.communicate(timeout=180)
    text = err.read_text()
    assert proc.returncode == 128 + sig, text[-3000:]
    assert "Traceback" not in text and "py4j" not in text.lower() and "at org.apache" not in text, text[-3000:]
    last = text.strip().splitlines()[-1]
    assert last.startswith(f"stopped by {sig.name}: the checkpoint holds step ") and "resume" in last
    return text, stdout.decode()


def _outputs(root: Path) -> dict:
    out = {}
    for kind in ("results", "late", "metrics"):
        df = pd.read_parquet(root / "out" / kind)
        df = df.drop(columns=[c for c in ("duration_s", "watermark_lag_s", "source_file") if c in df.columns])
        out[kind] = sorted(map(tuple, df.astype(str).itertuples(index=False)))
    out["summary"] = json.loads((root / "out" / "summary.json").read_text())
    return out


def test_sigint_and_sigterm_stop_after_the_step_and_a_restart_equals_a_clean_run(tmp_path, spark):
    clean, root = tmp_path / "clean", tmp_path / "stopped"
    land_many(clean, files=FILES, rows_per_file=ROWS_PER_FILE)
    Engine(load_config(clean / "pipeline.toml"), spark).run(drain=True)

    # The files are landed only once the run says it waits for them.
    land_many(tmp_path / "staged", files=FILES, rows_per_file=ROWS_PER_FILE)
    (root / "landing").mkdir(parents=True)
    cfg = (tmp_path / "staged" / "pipeline.toml").read_text()
    (root / "pipeline.toml").write_text(cfg + '\n[trigger]\ninterval = "100ms"\n')

    # 1. Continuous, not quiet, in a process group of its own: "waiting for files", the start line, step lines;
    #    SIGTERM to the whole group during step 1.
    proc, err = _start(root)
    try:
        _wait(lambda: "waiting for files in " + str(root / "landing") in err.read_text(), "waiting", proc, err)
        for f in sorted((tmp_path / "staged" / "landing").iterdir()):
            mtime = f.stat().st_mtime
            f.rename(root / "landing" / f.name)
            os.utime(root / "landing" / f.name, (mtime, mtime))
        # SIGTERM to the group once step 1 writes its outputs: a step in flight. The JVM ignores the signal
        # (docs/adr/0023), so the step finishes and commits as with SIGTERM to the driver alone; a JVM dying of
        # it would fail the step under the driver (py4j tracebacks, step 1 lost).
        _wait(lambda: _newest(root) >= 0 and any((root / "out" / kind / "batch_id=1").exists()
                                                 for kind in ("results", "late", "dead_letter", "metrics")),
              "step 1 writing", proc, err)
        assert _term_ignored(_children(proc.pid)), "the JVM must be started with SIGTERM ignored"
        text, stdout = _stop_group(proc, err, signal.SIGTERM)
    finally:
        if proc.poll() is None:  # a failed check above: leave no run (and its JVM) behind
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(60)
    start = [ln for ln in text.splitlines() if ln.startswith("lowwater run: ")]
    assert len(start) == 1, text
    assert (f"reading jsonl from {root / 'landing'}" in start[0] and str(root / "out" / "_checkpoint") in start[0]
            and "new (no committed step)" in start[0] and "continuous" in start[0])
    assert "INFO lowwater: step 0 (batch 0)" in text
    first = _newest(root)
    assert 1 <= first < FILES  # the step in flight (1) finished and committed; the input was not used up
    assert "a step in flight was not committed" not in text
    summary = json.loads(stdout)  # the summary of what the checkpoint holds, on stdout
    assert summary["steps"] == first + 1 and summary["balanced"] and 0 < summary["rows"] <= FILES * ROWS_PER_FILE

    # 2. Continuous, quiet, in this process: resumes; SIGINT once it is caught up (every file's step committed,
    #    no step in flight). The signal goes to this process only while the CLI's handler is in place.
    done = threading.Event()

    def sigint_when_caught_up() -> None:
        deadline = time.monotonic() + 240
        while not done.is_set() and time.monotonic() < deadline:
            handler = signal.getsignal(signal.SIGINT)  # the CLI's, with its engine, once Spark is up
            engine = getattr(handler, "engine", None)
            if engine is not None and _newest(root) == FILES - 1 and not engine.control.in_step:
                time.sleep(0.5)  # a few empty triggers: caught up
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.05)

    stopper = threading.Thread(target=sigint_when_caught_up, daemon=True)
    stopper.start()
    try:
        proc2 = run_cli_here(["run", "pipeline.toml", "-q"], root)
    finally:
        done.set()
        stopper.join(10)
    text = proc2.stderr
    assert proc2.returncode == 128 + signal.SIGINT, text[-3000:]
    assert "Traceback" not in text and "py4j" not in text.lower(), text[-3000:]
    last = text.strip().splitlines()[-1]
    assert last == f"stopped by SIGINT: the checkpoint holds step {FILES - 1}; run the same command to resume", text
    assert f"resuming after step {first} (W = " in text
    assert len(text.strip().splitlines()) == 2, text  # the start line and the stop line
    summary = json.loads(proc2.stdout)  # caught up: the summary of every row, nothing in flight
    assert summary["steps"] == FILES and summary["rows"] == FILES * ROWS_PER_FILE and summary["balanced"]

    # 3. The restart consumes the rest and drains: the same outputs as the uninterrupted run.
    proc3 = run_cli_here(["run", "pipeline.toml", "--once", "--drain", "-q"], root)  # this process: a JVM start less
    assert proc3.returncode == 0, proc3.stderr[-3000:]
    assert _outputs(root) == _outputs(clean)
