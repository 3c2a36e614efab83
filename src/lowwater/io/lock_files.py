"""The lock file's operations (``io/lock.py``): the OS for local paths, Hadoop's FileSystem otherwise.

Locally an exclusive create is a hard link and a replace is a rename; through
Hadoop (``spark/fs.HadoopFS``) an object store's are conditional ``PUT``s
(``If-None-Match: *``, ``If-Match: <etag>``), so the check-and-take of a
stale lock is a compare-and-swap there (docs/adr/0029).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from typing import Protocol
from urllib.parse import urlsplit


class RemoteFiles(Protocol):
    """What the lock needs from :class:`lowwater.runtime.fs.HadoopFS` for non-local paths."""

    def local_path(self, path: str) -> str | None: ...
    def create_new(self, path: str, text: str) -> bool: ...
    def read_text(self, path: str) -> str: ...
    def write_text_atomic(self, path: str, text: str) -> None: ...
    def exists(self, path: str) -> bool: ...
    def delete(self, path: str) -> None: ...
    def object_store(self, path: str) -> bool: ...
    def conditional_create(self, path: str) -> str | None: ...
    def etag(self, path: str) -> str | None: ...
    def replace_if(self, path: str, text: str, etag: str) -> bool: ...


class LockFiles:
    """Lock-file operations: the OS for local paths, Hadoop's FileSystem otherwise."""

    def __init__(self, path: str, remote: RemoteFiles | None) -> None:
        self.remote = remote
        self.local = local_os_path(path) if remote is None else remote.local_path(path)

    def create_new(self, path: str, text: str) -> bool:
        if self.local is None:
            assert self.remote is not None
            return self.remote.create_new(path, text)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        try:
            os.link(tmp, path)  # atomic, fails if the lock exists, complete when visible
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def swappable(self, path: str) -> bool:
        """Can a stale lock be replaced by a compare-and-swap (an object store's ``If-Match``)?"""
        return self.local is None and self.remote is not None and self.remote.object_store(path)

    def swap(self, path: str, judged: str, text: str) -> bool:
        """Replace the lock with ``text`` if it is still the one judged stale (only one run wins)."""
        assert self.remote is not None
        tag = self.remote.etag(path)
        if tag is None or self.read(path) != judged:
            return False
        return self.remote.replace_if(path, text, tag)

    def read(self, path: str) -> str | None:
        if self.local is None:
            assert self.remote is not None
            if not self.remote.exists(path):
                return None
            try:
                return self.remote.read_text(path)
            except Exception:  # noqa: BLE001 - deleted between the two calls
                return None
        try:
            with open(path) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def write(self, path: str, text: str) -> None:
        if self.local is None:
            assert self.remote is not None
            self.remote.write_text_atomic(path, text)
            return
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)

    def delete(self, path: str) -> None:
        if self.local is None:
            assert self.remote is not None
            self.remote.delete(path)
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    @contextlib.contextmanager
    def serialised(self, directory: str):  # noqa: ANN201
        """Local paths: one check-and-take at a time on this directory (``flock``)."""
        if self.local is None:
            yield
            return
        fd = os.open(directory, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the flock


def local_os_path(path: str) -> str | None:
    """The OS path of a plain or ``file:`` path (None for other schemes)."""
    parts = urlsplit(path)
    if parts.scheme == "file" and parts.netloc in ("", "localhost"):
        return parts.path
    return None if parts.scheme else path
