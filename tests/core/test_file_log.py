"""The file log and its stream reader, without Spark: name order, out-of-order flags, restarts, read limits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles

from lowwater.config import parse_config
from lowwater.io.file_backlog import FileBacklogs
from lowwater.io.filelog import FileLog
from lowwater.io.landing import _LogReader, logged_ranges
from lowwater.runtime.fs import local_files


class LocalFS:
    """The part of HadoopFS the log uses, on the local disk (HadoopFS needs a JVM for reads and writes)."""

    def list_names(self, path: str) -> list[str]:
        p = Path(path)
        return sorted(x.name for x in p.iterdir()) if p.is_dir() else []

    def list_files(self, path: str) -> list[str]:
        return local_files(path)

    def read_text(self, path: str) -> str:
        return Path(path).read_text()

    def exists(self, path: str) -> bool:
        return Path(path).exists()

    def write_text_atomic(self, path: str, text: str) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)


def touch(root: Path, *names: str) -> None:
    for n in names:
        (root / n).parent.mkdir(parents=True, exist_ok=True)
        (root / n).write_text("{}\n")


@pytest.fixture
def landing(tmp_path: Path) -> Path:
    (tmp_path / "landing").mkdir()
    return tmp_path / "landing"


def test_what_spark_skips_is_not_logged(landing):
    touch(landing, "b.jsonl", "a.jsonl", "_SUCCESS", ".hidden", "c.jsonl._COPYING_", "_tmp/x.jsonl",
          "day=2/z.jsonl", "sub/y.jsonl")
    assert local_files(str(landing)) == ["a.jsonl", "b.jsonl", "day=2/z.jsonl", "sub/y.jsonl"]


def test_files_are_logged_in_name_order_and_late_names_are_flagged(landing, tmp_path):
    fs = LocalFS()
    log = FileLog(fs, str(landing), str(tmp_path / "ckpt" / "files"))
    touch(landing, "part-02", "part-00")
    assert [f.name for f in log.refresh()] == ["part-00", "part-02"]  # one listing: name order
    assert log.refresh() == []  # nothing new, nothing written
    touch(landing, "part-03", "part-01")
    added = log.refresh()
    #   logged: part-00 part-02 | part-01 (before part-02: flagged) part-03 (after: fine)
    assert [(f.name, f.out_of_order) for f in added] == [("part-01", True), ("part-03", False)]
    assert [f.name for f in log.files(0, 4)] == ["part-00", "part-02", "part-01", "part-03"]
    # A restart reads the same positions back, flags included, and appends after them.
    again = FileLog(fs, str(landing), str(tmp_path / "ckpt" / "files"))
    assert again.files(0, 4) == log.files(0, 4) and len(again) == 4
    touch(landing, "part-00b")
    assert [(f.name, f.out_of_order) for f in again.refresh()] == [("part-00b", True)]
    with pytest.raises(RuntimeError, match="asks for"):
        again.files(3, 9)


def test_the_reader_admits_logged_positions_within_the_read_limit(tmp_path):
    counter = tmp_path / "files.json"
    reader = _LogReader(str(counter), max_files=2)
    assert reader.latestOffset({"position": 0}, reader.getDefaultReadLimit()) == {"position": 0}  # no log yet
    counter.write_text(json.dumps({"files": 5}))
    assert reader.getDefaultReadLimit() == ReadMaxFiles(2)
    assert reader.latestOffset({"position": 0}, ReadMaxFiles(2)) == {"position": 2}
    assert reader.latestOffset({"position": 4}, ReadMaxFiles(2)) == {"position": 5}
    assert reader.latestOffset({"position": 0}, ReadAllAvailable()) == {"position": 5}
    reader.prepareForTriggerAvailableNow()  # availableNow: files logged later wait for the next run
    counter.write_text(json.dumps({"files": 9}))
    assert reader.latestOffset({"position": 5}, ReadAllAvailable()) == {"position": 5}
    [part] = reader.partitions({"position": 2}, {"position": 5})
    assert list(reader.read(part)) == [(2,), (3,), (4,)]
    assert reader.partitions({"position": 5}, {"position": 5}) == []
    with pytest.raises(ValueError, match="older release"):
        reader.latestOffset({"logOffset": 3}, ReadAllAvailable())


def test_a_source_is_caught_up_when_its_batch_reaches_the_end_of_its_log(tmp_path):
    """Issue 31: the batch's end positions (Spark's offsets file, the union's order) against the logs' lengths."""
    src = {"format": "jsonl", "event_time": "t", "arrival_time": "a", "partition": "p",
           "schema": "p STRING, t DOUBLE, a DOUBLE"}
    cfg = parse_config({"source": [{**src, "name": "flights", "path": "f"}, {**src, "name": "weather", "path": "w"}],
                        "window": {"type": "tumbling", "size": "1h"}, "output": {"path": "out"}}, base_dir=tmp_path)
    offsets = Path(cfg.output.checkpoint) / "spark" / "offsets"
    offsets.mkdir(parents=True)
    (offsets / "3").write_text('v1\n{"batchWatermarkMs":0}\n{"position": 24}\n{"position": 7}\n')
    backlogs = FileBacklogs(LocalFS(), cfg)
    # flights read all 24 landed files; weather 7 of 30: landed, unread files, so not caught up
    assert backlogs.logs(3, {"flights": 24, "weather": 30}) == {"flights": True, "weather": False}
    assert backlogs.logs(3, {"flights": 25, "weather": 7}) == {"flights": False, "weather": True}
    assert backlogs.logs(4, {"flights": 24, "weather": 7}) == {}  # no offsets for the batch: nothing known


def test_a_micro_batch_of_several_file_logs_reads_its_positions_from_the_offset_log(tmp_path):
    """ADR 0047: the newest offsets entry is the running batch (one line a source, the union's order: the file
    sources, then Kafka's), the entry before it its start; anything unexpected: None (collect them instead)."""
    offsets = tmp_path / "offsets"
    offsets.mkdir()
    head = 'v1\n{"batchWatermarkMs":0}\n'
    (offsets / "0").write_text(head + '{"position": 2}\n{"position": 1}\n{"t":{"0":5}}\n')
    assert logged_ranges(LocalFS(), str(offsets), sources=3, files=2) == [(0, 2), (0, 1)]  # the first batch: from 0
    (offsets / "1").write_text(head + '{"position": 3}\n{"position": 1}\n{"t":{"0":9}}\n')
    assert logged_ranges(LocalFS(), str(offsets), sources=3, files=2) == [(2, 3), (1, 1)]  # a source with no file
    assert logged_ranges(LocalFS(), str(offsets), sources=2, files=2) is None  # not the query's sources
    (offsets / "2").write_text(head + '{"position": 2}\n{"position": 4}\n{"t":{"0":9}}\n')
    assert logged_ranges(LocalFS(), str(offsets), sources=3, files=2) is None  # a position went back
    (offsets / "2").write_text(head + "-\n{\"position\": 4}\n{\"t\":{\"0\":9}}\n")
    assert logged_ranges(LocalFS(), str(offsets), sources=3, files=2) is None  # no offset for a source
    assert logged_ranges(LocalFS(), str(tmp_path / "none"), sources=1, files=1) is None
