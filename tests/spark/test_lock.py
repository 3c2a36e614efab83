"""The output-path lock (``io/lock.py``) without Spark: holders, stale locks, release.

Other processes are plain Python subprocesses (no JVM): the lock is taken
before Spark starts, so this is exactly what a second ``lowwater run`` does
first.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lowwater.config import parse_config
from lowwater.io import lock
from lowwater.io.lock import LOCK_NAME, Holder, OutputLockedError, hold
from lowwater.testing.scenario import base_config

SRC = str(Path(lock.__file__).parents[2])


def cfg_at(tmp_path: Path, **output):  # noqa: ANN201
    return parse_config(base_config(output={"path": "out", **output}), base_dir=tmp_path)


def python(code: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, env=env)


HOLD_THEN = """
import sys, time
from lowwater.config import parse_config
from lowwater.io.lock import hold
from lowwater.testing.scenario import base_config
cfg = parse_config(base_config(output={"path": sys.argv[1]}), base_dir=sys.argv[2])
hold(cfg)
print("held", flush=True)
"""


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def write_lock(directory: Path, holder: Holder, beat_at: float | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_NAME
    path.write_text(json.dumps(vars(holder)))
    if beat_at is not None:
        (directory / f"{LOCK_NAME}.beat").write_text(json.dumps({"token": holder.token, "at": beat_at}))
    return path


def iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def test_second_holder_refused_naming_the_first_then_free_after_it_exits(tmp_path):
    cfg = cfg_at(tmp_path)
    held = hold(cfg)
    path = tmp_path / "out" / LOCK_NAME
    content = json.loads(path.read_text())
    assert (content["host"], content["pid"]) == (socket.gethostname(), os.getpid())
    other = python(HOLD_THEN, "out", str(tmp_path))
    assert other.returncode == 1 and "held" not in other.stdout
    line = other.stderr.strip().splitlines()[-1]
    assert "is in use by another lowwater run" in line
    assert f"host {socket.gethostname()}, pid {os.getpid()}, since {content['since']}" in line
    held.release()
    assert not path.exists() and not (tmp_path / "out" / f"{LOCK_NAME}.beat").exists()
    again = python(HOLD_THEN, "out", str(tmp_path))
    assert again.returncode == 0 and "held" in again.stdout
    assert not path.exists()  # released at interpreter exit


def test_released_when_the_holder_fails_or_is_interrupted(tmp_path):
    for ending in ("raise KeyboardInterrupt", "raise RuntimeError('boom')"):
        proc = python(HOLD_THEN + ending, "out", str(tmp_path))
        assert proc.returncode != 0 and "held" in proc.stdout, proc.stderr
        assert not (tmp_path / "out" / LOCK_NAME).exists(), ending


def test_holds_are_reentrant_within_a_process(tmp_path):
    cfg = cfg_at(tmp_path)
    first, second = hold(cfg), hold(cfg)
    path = tmp_path / "out" / LOCK_NAME
    first.release()
    first.release()  # idempotent: the second hold still counts
    assert path.exists()
    second.release()
    assert not path.exists()


def test_reentering_a_lock_whose_directory_was_deleted_takes_it_again(tmp_path):
    cfg = cfg_at(tmp_path)
    first = hold(cfg)
    shutil.rmtree(tmp_path / "out")  # e.g. a benchmark clearing its output between runs
    second = hold(cfg)
    assert json.loads((tmp_path / "out" / LOCK_NAME).read_text())["pid"] == os.getpid()
    first.release()
    second.release()
    assert not (tmp_path / "out" / LOCK_NAME).exists()


def test_a_checkpoint_outside_the_output_path_is_locked_too(tmp_path):
    cfg = cfg_at(tmp_path, checkpoint="elsewhere/ckpt")
    held = hold(cfg)
    assert (tmp_path / "out" / LOCK_NAME).exists() and (tmp_path / "elsewhere" / "ckpt" / LOCK_NAME).exists()
    held.release()
    assert not (tmp_path / "elsewhere" / "ckpt" / LOCK_NAME).exists()


@pytest.mark.parametrize(
    ("holder", "beat_offset_s", "why"),
    [
        # a process on this host that is gone (killed: it could not clean up)
        (lambda: Holder(socket.gethostname(), dead_pid(), iso(time.time()), "t1", None), None, "is not running"),
        # a live pid on this host, but started at another time than the holder: the pid was reused
        (lambda: Holder(socket.gethostname(), os.getppid(), iso(time.time()), "t2", "1"), None, "another process"),
        # another host whose heartbeat stopped long ago
        (lambda: Holder("elsewhere", 4242, iso(time.time() - 3600), "t3", None), -600, "no heartbeat"),
        # another host that never beat, started long ago
        (lambda: Holder("elsewhere", 4242, iso(time.time() - 3600), "t4", None), None, "no heartbeat"),
    ],
)
def test_a_stale_lock_is_taken_over_with_a_log_line(tmp_path, caplog, holder, beat_offset_s, why):
    cfg = cfg_at(tmp_path)
    h = holder()
    path = write_lock(tmp_path / "out", h, None if beat_offset_s is None else time.time() + beat_offset_s)
    with caplog.at_level(logging.WARNING, logger="lowwater"):
        held = hold(cfg)
    taken = [r.getMessage() for r in caplog.records if "taking over the lock" in r.getMessage()]
    assert len(taken) == 1 and h.describe() in taken[0] and why in taken[0]
    assert json.loads(path.read_text())["pid"] == os.getpid()
    held.release()


def test_a_live_holder_on_another_host_is_respected(tmp_path):
    cfg = cfg_at(tmp_path)
    h = Holder("elsewhere", 4242, iso(time.time() - 3600), "t5", None)
    path = write_lock(tmp_path / "out", h, beat_at=time.time() - 5)  # beating: alive
    with pytest.raises(OutputLockedError, match="host elsewhere, pid 4242"):
        hold(cfg)
    assert json.loads(path.read_text())["token"] == "t5"  # untouched


def test_a_held_lock_beats_and_notices_when_it_is_no_longer_ours(tmp_path, caplog):
    cfg = cfg_at(tmp_path)
    held = hold(cfg)
    assert any(t.name == "lowwater-lock-heartbeat" and t.is_alive() for t in threading.enumerate())
    beat = tmp_path / "out" / f"{LOCK_NAME}.beat"
    first = json.loads(beat.read_text())["at"]
    time.sleep(0.01)
    lock.beat()  # what the thread does every HEARTBEAT_S
    assert json.loads(beat.read_text())["at"] > first
    write_lock(tmp_path / "out", Holder("intruder", 1, iso(time.time()), "other", None))
    with caplog.at_level(logging.ERROR, logger="lowwater"):
        lock.beat()
        lock.beat()
    lost = [r.getMessage() for r in caplog.records if "no longer holds the lock" in r.getMessage()]
    assert len(lost) == 1 and "host intruder" in lost[0]  # said once, not every beat
    held.release()
    assert (tmp_path / "out" / LOCK_NAME).exists()  # not ours: left alone
