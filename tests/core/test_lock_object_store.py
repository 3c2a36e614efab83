"""The lock on an object store (``io/lock.py``, ``io/lock_files.py``) against an in-memory store with S3's
conditional writes: a create that a second writer loses, a stale lock replaced by compare-and-swap that only one
run wins, and a store without conditional writes refused in one line."""

from __future__ import annotations

import json
import uuid

import pytest

from lowwater.config import parse_config
from lowwater.io import lock
from lowwater.io.lock import LOCK_NAME, OutputLockedError, hold
from lowwater.io.lock_files import LockFiles


class Store:
    """``s3a://`` objects in a dict: conditional create (If-None-Match) and replace (If-Match on the etag)."""

    def __init__(self, conditional: str | None = None) -> None:
        self.objects: dict[str, tuple[str, str]] = {}
        self.conditional = conditional
        self.deletes: list[str] = []

    def local_path(self, path: str) -> None:  # noqa: ARG002
        return None

    def object_store(self, path: str) -> bool:
        return path.startswith("s3a://")

    def conditional_create(self, path: str) -> str | None:  # noqa: ARG002
        return self.conditional

    def create_new(self, path: str, text: str) -> bool:
        if path in self.objects:
            return False
        self.objects[path] = (text, uuid.uuid4().hex)
        return True

    def write_text_atomic(self, path: str, text: str) -> None:
        self.objects[path] = (text, uuid.uuid4().hex)

    def read_text(self, path: str) -> str:
        return self.objects[path][0]

    def exists(self, path: str) -> bool:
        return path in self.objects

    def delete(self, path: str) -> None:
        self.deletes.append(path)
        self.objects.pop(path, None)

    def etag(self, path: str) -> str | None:
        return self.objects[path][1] if path in self.objects else None

    def replace_if(self, path: str, text: str, etag: str) -> bool:
        if self.etag(path) != etag:
            return False
        self.objects[path] = (text, uuid.uuid4().hex)
        return True


OUT = "s3a://bucket/out"
PATH = f"{OUT}/{LOCK_NAME}"


def cfg():  # noqa: ANN201
    return parse_config({
        "source": {"format": "jsonl", "path": "landing", "event_time": "t", "schema": "t DOUBLE"},
        "window": {"type": "tumbling", "size": "10s", "aggregations": {"n": "count(t)"}},
        "output": {"path": OUT},
    }, base_dir=".")


STALE = json.dumps({"host": "gone-host", "pid": 7, "since": "2020-01-01T00:00:00Z", "token": "old",
                    "proc_start": None})


def test_two_runs_taking_over_one_stale_lock_only_one_wins():
    store = Store()
    store.write_text_atomic(PATH, STALE)
    a, b = LockFiles(PATH, store), LockFiles(PATH, store)
    assert a.swappable(PATH) and b.swappable(PATH)
    # Both judged the same stale lock; the first swap replaces it, the second finds another version.
    assert a.swap(PATH, STALE, '{"token": "a"}') is True
    assert b.swap(PATH, STALE, '{"token": "b"}') is False
    assert store.read_text(PATH) == '{"token": "a"}'


def test_a_stale_lock_is_swapped_not_deleted_and_a_store_without_conditional_writes_is_refused():
    store = Store()
    store.write_text_atomic(PATH, STALE)
    held = hold(cfg(), remote=store)
    try:
        mine = json.loads(store.read_text(PATH))
        assert mine["token"] != "old" and PATH not in store.deletes  # replaced in place (If-Match), no delete
        assert json.loads(store.read_text(f"{PATH}.beat"))["token"] == mine["token"]
    finally:
        held.release()
    assert not store.exists(PATH)
    assert not lock._HELD

    plain = Store(conditional="the store accepted a second create of one object: it ignores If-None-Match")
    with pytest.raises(OutputLockedError) as refused:
        hold(cfg(), remote=plain)
    line = str(refused.value)
    assert line.startswith(f"output.path: {OUT} is on an object store where two runs could both take the lock")
    assert "ignores If-None-Match" in line and "\n" not in line
    assert plain.objects == {}  # nothing written
