"""On an S3-compatible server (moto, ``s3_server``): the object-store primitives, the lock, and a pipeline whose
landing, output and checkpoint are ``s3a://`` -- killed, refused, reordered and reconciled (ADR 0029).

The run-level checks reuse the local tests' helpers and compare with the same pipeline run on the local file
system: an object store must change no result.
"""

from __future__ import annotations

import json
import socket

import pytest

from lowwater.config import parse_config
from lowwater.io.lock import LOCK_NAME, OutputLockedError, hold
from lowwater.spark.fs import HadoopFS

pytestmark = [pytest.mark.spark]


def test_object_store_writes_are_puts_and_creates_are_conditional(spark, s3_server):
    fs = HadoopFS(spark)
    d = s3_server.url("primitives")
    path = f"{d}/once"
    assert fs.conditional_create(path) is None  # the client offers it and the store refused a second create
    assert fs.create_new(path, "first") is True
    assert fs.create_new(path, "second") is False  # If-None-Match: * -> 412
    assert fs.read_text(path) == "first"
    tag = fs.etag(path)
    assert tag
    assert fs.replace_if(path, "stale", "not-its-etag") is False  # If-Match
    assert fs.replace_if(path, "swapped", tag) is True
    assert fs.replace_if(path, "again", tag) is False  # the etag changed with the swap
    assert fs.read_text(path) == "swapped"
    fs.write_text_atomic(f"{d}/manifest.json", '{"a": 1}')
    fs.write_text_atomic(f"{d}/manifest.json", '{"a": 2}')
    assert fs.read_text(f"{d}/manifest.json") == '{"a": 2}'
    assert fs.list_names(d) == ["manifest.json", "once"]  # no temporary object, nothing renamed, no probe left


def _cfg(out: str) -> object:
    return parse_config({
        "source": {"format": "jsonl", "path": "landing", "event_time": "t", "schema": "t DOUBLE"},
        "window": {"type": "tumbling", "size": "10s", "aggregations": {"n": "count(t)"}},
        "output": {"path": out},
    }, base_dir=".")


def test_the_lock_on_s3_refuses_a_live_holder_takes_over_a_gone_one_and_needs_conditional_writes(spark, s3_server):
    fs = HadoopFS(spark)
    out = s3_server.url("locked")
    lock = f"{out}/{LOCK_NAME}"
    live = {"host": "elsewhere", "pid": 1, "since": "2026-01-01T00:00:00Z", "token": "t1", "proc_start": None}
    fs.write_text_atomic(lock, json.dumps(live))
    fs.write_text_atomic(f"{lock}.beat", json.dumps({"token": "t1", "at": 4e12}))  # a heartbeat from the future
    with pytest.raises(OutputLockedError, match="in use by another lowwater run \\(host elsewhere, pid 1"):
        hold(_cfg(out), remote=fs)
    fs.delete(f"{lock}.beat")  # no heartbeat since 2026-01-01: gone
    held = hold(_cfg(out), remote=fs)
    mine = json.loads(fs.read_text(lock))
    assert mine["host"] == socket.gethostname() and mine["token"] != "t1"
    held.release()
    assert not fs.exists(lock)

    # A bucket whose client sends no If-None-Match (S3A's conditional create switched off): one line, no lock.
    bucket = "lowwater-no-conditional"
    spark.sparkContext._jsc.hadoopConfiguration().set(f"fs.s3a.bucket.{bucket}.create.conditional.enabled", "false")
    s3_server._request("PUT", f"/{bucket}")
    plain = f"s3a://{bucket}/out"
    with pytest.raises(OutputLockedError) as refused:
        hold(_cfg(plain), remote=fs)
    assert str(refused.value).startswith(f"output.path: {plain} is on an object store where two runs could both")
    assert "no conditional create" in str(refused.value) and "\n" not in str(refused.value)
    assert not fs.exists(f"{plain}/{LOCK_NAME}")
