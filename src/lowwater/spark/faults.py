"""Test-only crash injection at the points of a step's commit (``LOWWATER_FAULT``).

The crash tests kill the driver between a step's writes, its delivery and its
manifest, and check that a restart replays the step to the same outputs
(SEMANTICS.md §8). The engine calls :func:`crash_point` at each point; it does
nothing unless the environment names that point and step.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("lowwater")


def crash_point(point: str, step: int) -> None:
    """``LOWWATER_FAULT=before_commit:3`` kills the process there.

    ``before_commit:3:sigkill`` sends SIGKILL instead of exiting: to the
    process group when this process leads it (a test started the driver in its
    own session, so its JVM dies with it), else to this process.
    ``after_commit:0:wait:<path>`` does not crash: it waits there until the file
    ``<path>`` exists (at most 10 minutes), so a test can act while the run
    holds its lock, however fast its steps are, before killing it. Several
    faults are separated by ``;`` (e.g. a wait after step 0 and one before the
    last step's commit, so a run to be killed cannot finish first).
    """
    for spec in (os.environ.get("LOWWATER_FAULT") or "").split(";"):
        _one(spec, point, step)


def _one(spec: str, point: str, step: int) -> None:
    wait = f"{point}:{step}:wait:"
    if spec and spec.startswith(wait):
        import time

        path, deadline = spec[len(wait):], time.monotonic() + 600
        log.error("LOWWATER_FAULT: waiting at %s of step %d for %s", point, step, path)
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        return
    if spec and spec in (f"{point}:{step}", f"{point}:{step}:sigkill"):
        log.error("LOWWATER_FAULT: crashing at %s of step %d", point, step)
        if spec.endswith(":sigkill"):
            import signal

            if os.getpgrp() == os.getpid():
                os.killpg(os.getpid(), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(137)
