"""Benchmark results as data: each measured case appends one JSON line to ``bench/results/<bench>.jsonl``.

The lines are the measurement history (``python -m bench.report`` turns the newest
line per case into docs/performance.md's table). A line::

    {"case": "shapes/tumbling", "figures": {"native_eps": ..., "lowwater_eps": ..., "ratio": ...},
     "commit": "1a2b3c4", "date": "2026-11-27T14:02Z", "load": [0.4, 0.6, 0.8],
     "machine": "2 cores, 24 GB, Linux x86_64, Python 3.11.9, PySpark 4.2.0", "command": "python -m bench"}

``LOWWATER_BENCH_RESULTS`` names another directory (the tests use it); ``LOWWATER_BENCH_RESULTS=off``
records nothing.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def results_dir() -> Path | None:
    """Where lines go: ``bench/results/``, ``$LOWWATER_BENCH_RESULTS``, or nowhere when that is ``off``."""
    env = os.environ.get("LOWWATER_BENCH_RESULTS")
    if env == "off":
        return None
    return Path(env) if env else RESULTS


def commit() -> str | None:
    """The checkout's short commit, ``+dirty`` when it has uncommitted changes; None outside git."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def machine() -> str:
    """Cores, memory, OS, Python and PySpark: what a figure depends on besides the code."""
    parts = [f"{os.cpu_count()} cores"]
    try:
        kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal:"))
        parts.append(f"{round(kib / 2**20)} GB")
    except (OSError, StopIteration, ValueError):
        pass
    parts.append(f"{platform.system()} {platform.machine()}")
    parts.append(f"Python {platform.python_version()}")
    try:
        from importlib.metadata import version

        parts.append(f"PySpark {version('pyspark')}")
    except Exception:  # noqa: BLE001 - a missing distribution only leaves the version out
        pass
    return ", ".join(parts)


def _command() -> str:
    """How this process was started, as ``python -m bench.x ARGS`` when it was."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    prog = f"python -m {spec.name.removesuffix('.__main__')}" if spec else f"python {sys.argv[0]}"
    return " ".join([prog, *sys.argv[1:]])


def size(n: float) -> str:
    """``250000`` -> ``250k``, ``10000000`` -> ``10M``: sizes in case names."""
    if n >= 1_000_000:
        return f"{n / 1_000_000:g}M"
    return f"{n / 1000:g}k" if n >= 1000 else f"{n:g}"


def line(case: str, figures: dict[str, Any], command: str | None = None, **extra: Any) -> dict[str, Any]:
    """One result line for ``case`` measured now, on this machine, at this commit."""
    return {
        "case": case,
        "figures": figures,
        "commit": commit(),
        "date": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
        "load": [round(x, 2) for x in os.getloadavg()],
        "machine": machine(),
        "command": command or _command(),
        **extra,
    }


def record(bench: str, case: str, figures: dict[str, Any], command: str | None = None,
           **extra: Any) -> dict[str, Any]:
    """Append ``case``'s figures to ``<results>/<bench>.jsonl`` (unless recording is off); returns the line."""
    out = line(case, figures, command, **extra)
    directory = results_dir()
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        with (directory / f"{bench}.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(out) + "\n")
    return out
