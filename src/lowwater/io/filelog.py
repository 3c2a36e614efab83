"""The file log: which files of the landing zone a run reads, and in which order.

Spark's file stream source admits new files by modification time, and files
copied in one go (cp, rsync, an object-store sync) share one: ties are read
in arbitrary order, so the same files gave different answers. lowwater keeps
its own **append-only log** of the landing zone's files instead:

- a listing (``refresh``) appends the files it has not seen, sorted by name
  (``/``-separated path relative to ``source.path``), so files present
  together are read in name order whatever their modification times;
- a new file whose name sorts *before* a name already in the log cannot be
  read in its place any more (the positions before it are taken): it is
  appended all the same (nothing is skipped) and flagged ``out_of_order``;
- the log is stored next to the checkpoint as segments
  ``<first position, 12 digits>.json``, each written atomically *before* any
  micro-batch can refer to its positions, so a batch replayed after a crash
  maps its positions to the same files.

A micro-batch is a range of positions (``io/landing.py``); the log is the
only place where positions become file names.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass

from lowwater.io.delta_log import new_files, split_name
from lowwater.runtime.fs import HadoopFS

_SEGMENT = re.compile(r"^(\d{12})\.json$")


@dataclass(frozen=True)
class LoggedFile:
    """One landed file: its name relative to the landing directory and whether it landed out of order."""

    name: str
    out_of_order: bool = False


class FileLog:
    """The append-only, name-ordered log of a landing directory's files (thread-safe)."""

    def __init__(self, fs: HadoopFS, source: str, directory: str) -> None:
        self.fs = fs
        self.source = source.rstrip("/")
        self.directory = directory.rstrip("/")
        self._lock = threading.Lock()
        self._files: list[LoggedFile] = []
        for name in self.fs.list_names(self.directory):
            m = _SEGMENT.match(name)
            if not m:
                continue
            start = int(m.group(1))
            if start != len(self._files):  # an atomic write cannot leave a hole; someone edited the log
                msg = f"file log {self.directory}: segment {name} starts at {start}, expected {len(self._files)}"
                raise RuntimeError(msg)
            seg = json.loads(self.fs.read_text(f"{self.directory}/{name}"))
            self._files += [LoggedFile(f["name"], bool(f.get("out_of_order"))) for f in seg["files"]]
        self._names = {f.name for f in self._files}
        self._last = max(self._names, default=None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._files)

    def files(self, start: int, end: int) -> list[LoggedFile]:
        """The files at positions ``[start, end)``."""
        with self._lock:
            if end > len(self._files):
                msg = f"file log {self.directory} has {len(self._files)} files; a micro-batch asks for {start}..{end}"
                raise RuntimeError(msg)
            return self._files[start:end]

    def path(self, name: str) -> str:
        """Where a logged file is (``source.path`` + its name)."""
        return f"{self.source}/{name}"

    def _listing(self) -> list[str]:
        """The landing zone's files now, sorted by name."""
        return self.fs.list_files(self.source)

    def refresh(self) -> list[LoggedFile]:
        """List the landing directory and append the files not seen before (durably); returns them."""
        with self._lock:
            new = [n for n in self._listing() if n not in self._names]
            if not new:
                return []
            last = self._last
            added = [LoggedFile(n, last is not None and n < last) for n in new]  # new is sorted
            segment = {"files": [{"name": f.name, "out_of_order": f.out_of_order} for f in added]}
            self.fs.write_text_atomic(f"{self.directory}/{len(self._files):012d}.json", json.dumps(segment))
            self._files += added
            self._names.update(new)
            self._last = max(new[-1], last) if last is not None else new[-1]
        return added


class DeltaFileLog(FileLog):
    """The file log of a Delta table (``format = "delta"``): files of new commits, in commit order.

    Logged names are ``@<version>/<file>`` (``io/delta_log.py``), which sort in
    commit order, so the file log's name order is the table's arrival order
    and no file is ever out of order.
    """

    def __init__(self, fs: HadoopFS, source: str, directory: str, where: str) -> None:
        super().__init__(fs, source, directory)
        self.where = where

    def _listing(self) -> list[str]:
        """The files of the commits after the last one logged (commits adding none are read again: small)."""
        after = split_name(self._last)[0] if self._last is not None else -1
        return new_files(self.fs, self.source, after, self.where)

    def path(self, name: str) -> str:
        return f"{self.source}/{split_name(name)[1]}"
