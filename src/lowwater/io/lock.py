"""One run per output path: a lock file that names its holder.

Two ``lowwater run`` on one output path (a second terminal, a retried cron
job) would race on the same checkpoint and output directories: one dies in
Spark's commit protocol, the other commits half a step. So a run first takes
``<output.path>/_lowwater.lock`` (and ``<checkpoint>/_lowwater.lock`` when the
checkpoint is configured outside the output path); a second run refuses with
one line naming the holder (host, pid, since when).

The protocol:

1. **Create atomically.** Locally the lock's JSON (host, pid, the process's
   start time, since, a random token) is written to a private file and
   hard-linked to the lock path (``link`` fails if the path exists, and the
   content is complete the moment the name appears). Other schemes go through
   Hadoop's ``create(overwrite=false)`` (atomic on HDFS). On an object store
   (``s3a://``) it is a conditional ``PUT`` (``If-None-Match: *``) that a
   second writer loses; a client or store without one is refused in one line
   before anything is written (``HadoopFS.conditional_create``, ADR 0029).
2. **Is the holder alive?** On the same host: its pid exists and still has
   the start time recorded in the lock (Linux ``/proc/<pid>/stat``; guards
   against pid reuse). On another host: a heartbeat -- the holder rewrites
   ``_lowwater.lock.beat`` (its token and the time) every
   :data:`HEARTBEAT_S`; a holder whose last beat (or, before the first, its
   ``since``) is older than :data:`STALE_AFTER_S` is gone. This assumes the
   hosts' clocks agree to well within that margin.
3. **Take over a stale lock** (the holder is gone): log one line naming it,
   delete it (after re-reading that it is still the same token) and create
   ours. Locally the whole check-and-take is serialised by ``flock`` on the
   directory, so two runs cannot both take over; on an object store the
   stale lock is replaced with ``If-Match: <its etag>``, which only one run
   wins; through other Hadoop file systems a narrow race remains (two runs
   taking over the same stale lock within milliseconds).
4. **Release** deletes the lock and its beat if they are still ours: when
   :meth:`PipelineLock.release` is called (the engine does at the end of a
   run, also on errors and Ctrl-C), and at interpreter exit. A ``SIGKILL``
   leaves the lock behind; the next run finds its pid gone and takes over.

Holds are re-entrant within a process (the CLI takes the lock before Spark
starts, so a second run refuses in a second; the engine takes it again
through Hadoop's FileSystem for any scheme).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from lowwater.config import ConfigError, PipelineConfig
from lowwater.io.lock_files import LockFiles, RemoteFiles, local_os_path

log = logging.getLogger("lowwater")

LOCK_NAME = "_lowwater.lock"
HEARTBEAT_S = 10.0
STALE_AFTER_S = 60.0


class OutputLockedError(ConfigError):
    """Another live run holds the output path (reported like a configuration error: one line, exit 2)."""


@dataclass(frozen=True)
class Holder:
    """Who holds a lock; ``proc_start`` tells a live holder from a reused pid."""

    host: str
    pid: int
    since: str
    token: str
    proc_start: str | None = None

    def describe(self) -> str:
        return f"host {self.host}, pid {self.pid}, since {self.since}"

    @classmethod
    def me(cls) -> Holder:
        since = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
        return cls(socket.gethostname(), os.getpid(), since, uuid.uuid4().hex, _proc_start(os.getpid()))


def _proc_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), None elsewhere or when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, counted after the command name


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _since_s(since: str) -> float:
    try:
        return datetime.fromisoformat(since.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0



def _parse(text: str | None) -> Holder | None:
    if not text:
        return None
    try:
        return Holder(**json.loads(text))
    except (ValueError, TypeError):
        return None


def gone_reason(holder: Holder, beat_at: float | None, now: float | None = None) -> str | None:
    """Why the holder of a lock is gone, or None while it may be alive."""
    now = time.time() if now is None else now
    if holder.host == socket.gethostname():
        if holder.pid == os.getpid():
            return "it was left by this process"
        if not _pid_alive(holder.pid):
            return f"process {holder.pid} is not running"
        start = _proc_start(holder.pid)
        if holder.proc_start and start and start != holder.proc_start:
            return f"pid {holder.pid} now belongs to another process"
        return None
    last = max(_since_s(holder.since), beat_at or 0.0)
    if now - last > STALE_AFTER_S:
        return f"no heartbeat from host {holder.host} for {now - last:.0f} s"
    return None


class _Held:
    """A lock this process holds: the file, our token, how many holds are open."""

    def __init__(self, path: str, files: LockFiles, holder: Holder) -> None:
        self.path = path
        self.files = files
        self.holder = holder
        self.count = 1
        self.lost = False


_HELD: dict[str, _Held] = {}
_MUTEX = threading.Lock()
_BEATING: list[threading.Thread] = []


def _beat_text(holder: Holder) -> str:
    return json.dumps({"token": holder.token, "at": time.time()})


def _heartbeat() -> None:
    """The heartbeat thread: :func:`beat` every :data:`HEARTBEAT_S`."""
    while True:
        time.sleep(HEARTBEAT_S)
        beat()


def beat() -> None:
    """Rewrite every held lock's beat file; log once if a lock is no longer ours."""
    with _MUTEX:
        held = list(_HELD.values())
    for h in held:
        try:
            current = _parse(h.files.read(h.path))
            if current is None or current.token != h.holder.token:
                if not h.lost:
                    log.error("%s: this run no longer holds the lock (now: %s)", h.path,
                              current.describe() if current else "no lock")
                h.lost = True
                continue
            h.files.write(f"{h.path}.beat", _beat_text(h.holder))
        except Exception as e:  # noqa: BLE001 - a heartbeat must never kill the run
            log.warning("%s: heartbeat failed: %s", h.path, e)


def _acquire(directory: str, remote: RemoteFiles | None, label: str = "output.path") -> str:
    """Take (or re-enter) the lock of ``directory``; returns its key (the lock file's path)."""
    files = LockFiles(f"{directory.rstrip('/')}/{LOCK_NAME}", remote)
    path = files.local or f"{directory.rstrip('/')}/{LOCK_NAME}"
    with _MUTEX:
        held = _HELD.get(path)
    if held is not None:
        if _parse(files.read(path)) != held.holder:  # our lock vanished (its directory was deleted): again
            if files.local is not None:
                os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
            if not files.create_new(path, json.dumps(asdict(held.holder))):
                holder = _parse(files.read(path))
                msg = f"{label}: {directory} was taken by another lowwater run ({holder.describe() if holder else '?'})"
                raise OutputLockedError(msg)
        with _MUTEX:
            held.count += 1
        return path
    if files.local is not None:
        os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
    elif remote is not None and (why := remote.conditional_create(path)) is not None:
        msg = (f"{label}: {directory} is on an object store where two runs could both take the lock ({why}); "
               "use a store with conditional writes (If-None-Match), or a file system path")
        raise OutputLockedError(msg)
    me = Holder.me()
    text = json.dumps(asdict(me))
    with files.serialised(os.path.dirname(path) or "/"):
        for _ in range(3):
            if files.create_new(path, text):
                break
            raw = files.read(path)
            if raw is None:
                continue  # released in between: try again
            holder = _parse(raw)
            beat = _parse_beat(files.read(f"{path}.beat"), holder)
            if holder is None:  # being written right now (Hadoop: create, then write), or damaged
                msg = (f"{label}: the lock file {path} is unreadable (another run is creating it right now, "
                       "or it is damaged); if no run is using this output path, delete it")
                raise OutputLockedError(msg)
            reason = gone_reason(holder, beat)
            if reason is None:
                msg = (f"{label}: {directory} is in use by another lowwater run ({holder.describe()}); "
                       f"wait for it to end or stop it (lock file {path})")
                raise OutputLockedError(msg)
            log.warning("%s: taking over the lock of a run that is gone (%s): %s", path, holder.describe(), reason)
            if files.swappable(path):
                if files.swap(path, raw, text):
                    break
                continue  # another run took it first: judge the new holder
            if files.read(path) == raw:  # still the lock we judged
                files.delete(f"{path}.beat")
                files.delete(path)
        else:
            msg = f"{label}: could not take the lock {path} (it keeps changing hands)"
            raise OutputLockedError(msg)
    files.write(f"{path}.beat", _beat_text(me))
    with _MUTEX:
        _HELD[path] = _Held(path, files, me)
        if not _BEATING:
            t = threading.Thread(target=_heartbeat, name="lowwater-lock-heartbeat", daemon=True)
            t.start()
            _BEATING.append(t)
    return path


def _parse_beat(text: str | None, holder: Holder | None) -> float | None:
    """The time of the holder's last heartbeat (None without one of its own)."""
    try:
        beat = json.loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(beat, dict) or (holder is not None and beat.get("token") != holder.token):
        return None
    return float(beat.get("at", 0.0))


def run_in_progress(directory: str) -> bool:
    """Does a live lowwater run hold the lock of ``directory`` (a local path) now? For the dashboard's live/finished.

    A lock left by a killed run (its holder gone, as a next run would find) is not a run in progress.
    """
    path = os.path.join(directory, LOCK_NAME)
    with _MUTEX:
        if path in _HELD:  # this process runs it (``lowwater run --dashboard``)
            return True
    try:
        with open(path) as f:
            holder = _parse(f.read())
    except OSError:
        return False
    if holder is None or (holder.host == socket.gethostname() and holder.pid == os.getpid()):
        return False
    try:
        with open(f"{path}.beat") as f:
            beat = _parse_beat(f.read(), holder)
    except OSError:
        beat = None
    return gone_reason(holder, beat) is None


def _release(key: str) -> None:
    with _MUTEX:
        h = _HELD.get(key)
        if h is None:
            return
        h.count -= 1
        if h.count > 0:
            return
        del _HELD[key]
    try:
        current = _parse(h.files.read(h.path))
        if current is not None and current.token == h.holder.token:
            h.files.delete(f"{h.path}.beat")
            h.files.delete(h.path)
    except Exception as e:  # noqa: BLE001 - e.g. the JVM is already gone at exit
        log.warning("%s: could not release the lock: %s", h.path, e)


def lock_dirs(cfg: PipelineConfig) -> list[str]:
    """The directories a run locks: the output path, and the checkpoint when it lives elsewhere."""
    out = cfg.output.path.rstrip("/")
    ckpt = cfg.output.checkpoint.rstrip("/")
    return [out] if ckpt == out or ckpt.startswith(out + "/") else [out, ckpt]


class PipelineLock:
    """This process's hold on a pipeline's directories; :meth:`release` once done (idempotent)."""

    def __init__(self, keys: list[str]) -> None:
        self._keys = keys

    def release(self) -> None:
        keys, self._keys = self._keys, []
        for k in reversed(keys):
            _release(k)


def hold(cfg: PipelineConfig, remote: RemoteFiles | None = None) -> PipelineLock:
    """Take (or re-enter) the lock of every directory of the pipeline.

    Without ``remote`` (before Spark starts) only local paths are locked and
    others are left to the engine. Raises :class:`OutputLockedError` naming the
    holder when another live run has one.
    """
    keys: list[str] = []
    try:
        for i, d in enumerate(lock_dirs(cfg)):
            if remote is None and local_os_path(d) is None:
                continue  # another scheme: the engine locks it through Hadoop's FileSystem
            keys.append(_acquire(d, remote, "output.path" if i == 0 else "output.checkpoint"))
    except BaseException:
        PipelineLock(keys).release()
        raise
    return PipelineLock(keys)


@atexit.register
def _release_all() -> None:
    """At interpreter exit (also after an error or Ctrl-C), give back every lock still held."""
    with _MUTEX:
        keys = list(_HELD)
    for k in keys:
        with _MUTEX:
            if k in _HELD:
                _HELD[k].count = 1
        _release(k)
