"""docs/performance.md's table is generated from bench/results/*.jsonl (``python -m bench.report``),
the newest line per case wins, and the bench scripts' helper appends well-formed lines."""

from __future__ import annotations

import json
import re

import pytest

from bench import report, results


def test_the_committed_table_is_the_generated_one():
    doc = report.DOC.read_text(encoding="utf-8")
    generated = report.table(report.load())
    assert report.render(doc, generated) == doc, "docs/performance.md is stale: run python -m bench.report"
    assert report.main(["--check"]) == 0


def test_every_committed_line_names_its_case_figures_date_and_origin():
    lines = report.load()
    assert len(lines) >= 20
    for ln in lines:
        assert ln["case"] and isinstance(ln["figures"], dict) and ln["figures"], ln
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}Z)?", ln["date"]), ln
        assert ln.get("commit") or ln.get("source"), ln
        assert ln.get("machine"), ln


def _write(path, *lines):
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")


def test_the_newest_line_of_a_case_wins_whatever_the_order(tmp_path):
    _write(tmp_path / "b.jsonl",
           {"case": "keys/1000", "figures": {"ratio": 0.9}, "date": "2026-11-26T10:00Z"},
           {"case": "keys/1000", "figures": {"ratio": 0.3}, "date": "2026-11-20T10:00Z"},
           {"case": "shapes/tumbling", "figures": {"ratio": 0.7}, "date": "2026-11-25"})
    _write(tmp_path / "a.jsonl",
           {"case": "keys/1000", "figures": {"ratio": 0.5}, "date": "2026-11-24T10:00Z"},
           {"case": "shapes/tumbling", "figures": {"ratio": 0.8}, "date": "2026-11-25"})
    lines = report.load(tmp_path)
    best = {ln["case"]: ln["figures"]["ratio"] for ln in report.newest(lines)}
    # keys: the newest date, though it is neither first nor last; shapes: equal dates, the later line.
    assert best == {"keys/1000": 0.9, "shapes/tumbling": 0.7}
    text = report.table(lines)
    assert text.count("\n| keys/1000 |") == 1 and "ratio 0.9" in text and "ratio 0.5" not in text
    assert "ratio 0.7" in text and "ratio 0.8" not in text


def test_before_after_sides_are_data_not_current_figures(tmp_path):
    _write(tmp_path / "ab.jsonl", {"case": "ab/tumbling, old", "figures": {"best_s": 17.4}, "date": "2026-11-28"})
    _write(tmp_path / "suite.jsonl", {"case": "shapes/tumbling", "figures": {"ratio": 0.5}, "date": "2026-11-28"})
    assert [ln["case"] for ln in report.load(tmp_path)] == ["shapes/tumbling"]


def test_the_table_goes_between_the_markers_and_nothing_else_changes(tmp_path):
    _write(tmp_path / "x.jsonl", {"case": "c", "figures": {"native_eps": 12345, "ratio": 0.5}, "date": "2026-11-27",
                                  "commit": "abc1234", "load": [0.5, 1.0, 1.5], "machine": "2 cores"})
    doc = tmp_path / "perf.md"
    doc.write_text(f"# P\n\nbefore\n{report.BEGIN}\nold table\n{report.END}\nafter\n", encoding="utf-8")
    assert report.main(["--results", str(tmp_path), "--doc", str(doc), "--check"]) == 1
    assert report.main(["--results", str(tmp_path), "--doc", str(doc)]) == 0
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("# P\n\nbefore\n" + report.BEGIN + "\n| case |") and text.endswith(report.END + "\nafter\n")
    assert "| c | native ev/s 12,345; ratio 0.5 | 2026-11-27 | abc1234 | 0.5 / 1 / 1.5 | 2 cores |" in text
    assert "old table" not in text
    assert report.main(["--results", str(tmp_path), "--doc", str(doc), "--check"]) == 0
    with pytest.raises(SystemExit, match="markers"):
        report.render("no markers here", "x")


def test_record_appends_a_line_with_commit_date_load_and_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("LOWWATER_BENCH_RESULTS", str(tmp_path))
    results.record("suite", "keys/1000", {"ratio": 0.5}, command="python -m bench --cases keys")
    results.record("suite", "keys/1000", {"ratio": 0.6})
    lines = report.load(tmp_path)
    assert [ln["figures"]["ratio"] for ln in lines] == [0.5, 0.6]
    first = lines[0]
    assert first["command"] == "python -m bench --cases keys"
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}Z", first["date"])
    assert len(first["load"]) == 3 and all(isinstance(x, float) for x in first["load"])
    assert "cores" in first["machine"] and "Python" in first["machine"]
    assert first["commit"] is None or re.fullmatch(r"[0-9a-f]{7,}(\+dirty)?", first["commit"])
    monkeypatch.setenv("LOWWATER_BENCH_RESULTS", "off")
    results.record("suite", "keys/1000", {"ratio": 0.7})
    assert len(report.load(tmp_path)) == 2


def test_sizes_in_case_names():
    assert [results.size(n) for n in (200_000, 2_000, 10_000_000, 2_500_000, 500)] == \
        ["200k", "2k", "10M", "2.5M", "500"]
