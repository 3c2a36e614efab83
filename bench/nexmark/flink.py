"""Flink 2.3 for the benchmark: a venv of its own, and one subprocess per query run.

PyFlink is not a lowwater dependency: the first run creates
``bench/out/flink-venv`` (ignored by git) and installs ``apache-flink`` there
with pip; later runs reuse it. The query itself runs in
:mod:`bench.nexmark.flink_driver`, under that venv's Python.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FLINK_VERSION = "2.3.0"
VENV = Path(__file__).resolve().parents[1] / "out" / "flink-venv"
DRIVER = Path(__file__).with_name("flink_driver.py")


class FlinkUnavailable(RuntimeError):
    """The venv could not be made or PyFlink not installed: the command and its error."""


def python(venv: Path = VENV) -> Path:
    """The venv's interpreter, with ``apache-flink`` installed (created on first use)."""
    exe = venv / "bin" / "python"
    if exe.exists() and _has_flink(exe):
        return exe
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(exe), "-m", "pip", "install", "-q", f"apache-flink=={FLINK_VERSION}"],
    ]
    for cmd in steps:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise FlinkUnavailable(f"{' '.join(cmd)} failed ({done.returncode}): {' | '.join(tail)}")
    if not _has_flink(exe):
        raise FlinkUnavailable(f"{exe}: pyflink {FLINK_VERSION} still not importable after pip install")
    return exe


def _has_flink(exe: Path) -> bool:
    probe = "import importlib.metadata as m; print(m.version('apache-flink'))"
    done = subprocess.run([str(exe), "-c", probe], capture_output=True, text=True, check=False)
    return done.returncode == 0 and done.stdout.strip() == FLINK_VERSION


def run(files: list[Path], query: str, backend: str, out: Path, work: Path, lateness_s: int,
        idle_timeout_s: int, parallelism: int | None = None) -> dict:
    """One query on Flink (``backend``: hashmap | rocksdb); ``{"seconds": job wall time}``."""
    spec = {
        "files": [str(f) for f in files], "query": query, "backend": backend,
        "parallelism": parallelism or os.cpu_count() or 1, "lateness_s": lateness_s,
        "idle_timeout_s": idle_timeout_s, "out": str(out), "work": str(work),
    }
    work.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "SPARK_HOME")}
    done = subprocess.run([str(python()), str(DRIVER), json.dumps(spec)], capture_output=True, text=True,
                          cwd=work, env=env, check=False)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise RuntimeError(f"flink {query}/{backend} failed ({done.returncode}): {tail[-1500:]}")
    return json.loads(lines[-1])
