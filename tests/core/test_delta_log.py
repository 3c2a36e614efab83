"""A Delta table's log as a source's file log (``io/delta_log.py``): files in commit order, then by name; what
an append-only reading cannot follow is refused in one line."""

from __future__ import annotations

import json

import pytest

from lowwater.io.delta_log import DeltaSourceError, commit_files, logged_name, new_files, order_key, split_name


def actions(*acts: dict) -> str:
    return "\n".join(json.dumps(a) for a in acts) + "\n"


def add(path: str, data: bool = True, **extra) -> dict:  # noqa: ANN003
    return {"add": {"path": path, "dataChange": data, "size": 1, **extra}}


class Log:
    """``_delta_log`` in a dict."""

    def __init__(self, commits: dict[int, str]) -> None:
        self.commits = commits

    def list_names(self, path: str) -> list[str]:
        assert path == "/t/_delta_log"
        return sorted([f"{v:020d}.json" for v in self.commits] + ["_last_checkpoint", "00000000000000000000.crc"])

    def read_text(self, path: str) -> str:
        return self.commits[int(path.rsplit("/", 1)[1][:20])]


META = {"metaData": {"id": "x", "partitionColumns": [], "configuration": {}}}


def test_files_come_in_commit_order_then_by_name_and_compaction_is_skipped():
    log = Log({
        0: actions({"protocol": {"minReaderVersion": 1}}, META, add("part-b.parquet"), add("part-a%20x.parquet")),
        1: actions({"commitInfo": {"operation": "WRITE"}}, add("part-0.parquet")),
        2: actions(add("big.parquet", data=False), {"remove": {"path": "part-0.parquet", "dataChange": False}}),
        3: actions(add("part-9.parquet")),
    })
    names = new_files(log, "/t", -1, "source.path")
    assert names == [logged_name(0, "part-a x.parquet"), logged_name(0, "part-b.parquet"),
                     logged_name(1, "part-0.parquet"), logged_name(3, "part-9.parquet")]
    assert names == sorted(names)  # the file log's name order is the commit order
    assert split_name(names[2]) == (1, "part-0.parquet")
    assert order_key("/t/", names[2]) == "/t@00000000000000000001/part-0.parquet"
    assert new_files(log, "/t", 1, "source.path") == [logged_name(3, "part-9.parquet")]
    assert new_files(log, "/t", 3, "source.path") == []


@pytest.mark.parametrize(("acts", "says"), [
    ([{"remove": {"path": "p", "dataChange": True}}], "version 4 removes or rewrites rows"),
    ([add("p", deletionVector={"storageType": "u"})], "deletion vector"),
    ([{"metaData": {"partitionColumns": ["day"], "configuration": {}}}], "partitioned by day"),
    ([{"metaData": {"partitionColumns": [], "configuration": {"delta.columnMapping.mode": "name"}}}],
     "column mapping \\(name"),
])
def test_what_an_append_only_reading_cannot_follow_is_one_line(acts, says):
    with pytest.raises(DeltaSourceError, match=f"^source.path: .*{says}") as e:
        commit_files(4, actions(*acts), "source.path")
    assert "\n" not in str(e.value)


def test_a_log_whose_first_commits_were_cleaned_up_is_refused_and_a_missing_commit_waits():
    with pytest.raises(DeltaSourceError, match="log starts at version 5 .older commits were cleaned up"):
        new_files(Log({5: actions(add("a")), 6: actions(add("b"))}), "/t", -1, "source.path")
    # Resuming after version 5 needs only what follows; a gap (6 not visible yet) stops before it.
    assert new_files(Log({5: actions(add("a")), 7: actions(add("c"))}), "/t", 5, "source.path") == []


def test_reconcile_and_whatif_refuse_a_delta_source_in_one_line():
    from lowwater.advisor.replay_log import arrival_sorted
    from lowwater.config import ConfigError, parse_config
    from lowwater.reconcile.job import check_supported

    cfg = parse_config({
        "source": {"format": "delta", "path": "orders", "event_time": "t", "schema": "t DOUBLE"},
        "window": {"type": "tumbling", "size": "10s", "aggregations": {"n": "count(t)"}},
        "output": {"path": "out"},
    }, base_dir=".")
    with pytest.raises(ConfigError, match='^reconcile: a Delta source is not supported yet'):
        check_supported(cfg)
    with pytest.raises(ConfigError, match='^whatif: a Delta source is not supported yet'):
        arrival_sorted(None, cfg)  # refused before any Spark call
