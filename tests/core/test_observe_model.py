"""The metrics model: one step's row and totals become the samples every exporter shows (no Spark)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lowwater.observe.model import FIGURES, Histogram, late_rate, progress_figures, samples, split_name
from lowwater.spark.metrics import METRICS_ARROW
from lowwater.spark.step import TOTAL_KEYS


def _ts(s: float) -> datetime:
    return datetime.fromtimestamp(s, UTC)


#   partition  a: W_a = 100 s     b: W_b = 90 s (holds W back)     c: idle at 40 s
ROW = {
    "spark_batch": 7,
    "low_watermark": _ts(90),
    "partition_watermarks": [("a", _ts(100)), ("b", _ts(90)), ("c", _ts(40))],
    "idle_partitions": ["c"],
    "holding_partition": "b",
    "spread_s": 10.0,
    "watermark_lag_s": 4.5,
    "rows": 200, "on_time": 180, "late_updates": 8, "too_late": 2, "dead_letter": 10, "clipped": 1,
    "windows_fired": 3, "revisions": 1, "open_windows": 12, "state_bytes": 4096, "duration_s": 0.8,
    "out_of_order_files": 0, "out_of_order_rows": 0, "arrival_regressions": 0, "markers": 0, "regressions": 2,
    "partition_lateness_s": [("a", 5.0), ("b", 5.0), ("c", 5.0)],
    "source_watermarks": None,
    "held_rows": 0,
}
TOTALS = {k: 0 for k in TOTAL_KEYS} | {"rows": 500, "on_time": 450, "late_updates": 20, "too_late": 5,
                                        "dead_letter": 25, "clipped": 3, "regressions": 2, "windows_fired": 9}


def _by(samples_, name):
    return {s.labels: s.value for s in samples_ if s.name == name}


def test_every_figure_reads_an_existing_metrics_column():
    columns = set(METRICS_ARROW.names)
    for f in FIGURES:
        assert f.column is None or f.column in columns, f.name
        assert f.name.startswith("lowwater_")
        assert (f.kind == "counter") == f.name.endswith("_total"), f.name
    assert len({f.name for f in FIGURES}) == len(FIGURES)


def test_samples_of_one_step():
    out = samples(ROW, TOTALS, source="payments")
    assert _by(out, "lowwater_low_watermark_seconds") == {(): 90.0}
    assert _by(out, "lowwater_watermark_seconds") == {
        (("source", "payments"), ("partition", "a")): 100.0,
        (("source", "payments"), ("partition", "b")): 90.0,
        (("source", "payments"), ("partition", "c")): 40.0,
    }
    assert _by(out, "lowwater_partition_idle")[(("source", "payments"), ("partition", "c"))] == 1.0
    assert _by(out, "lowwater_partition_holding") == {
        (("source", "payments"), ("partition", "a")): 0.0,
        (("source", "payments"), ("partition", "b")): 1.0,
        (("source", "payments"), ("partition", "c")): 0.0,
    }
    assert _by(out, "lowwater_partition_spread_seconds") == {(): 10.0}
    assert _by(out, "lowwater_watermark_lag_seconds") == {(): 4.5}
    assert _by(out, "lowwater_late_rate_ratio") == {(): 2 / 190}  # too late / valid (rows - dead letters)
    assert _by(out, "lowwater_input_rows_per_second") == {(): 250.0}
    # counters: the checkpoint's running totals; the four classes add up to the input
    classes = _by(out, "lowwater_rows_total")
    assert sum(classes.values()) == TOTALS["rows"] == _by(out, "lowwater_input_rows_total")[()]
    assert _by(out, "lowwater_watermark_regressions_total") == {(): 2.0}
    assert _by(out, "lowwater_source_watermark_seconds") == {}  # one source: the low watermark is its own
    assert _by(out, "lowwater_output_watermark_seconds") == {}  # a window pipeline has no output watermark


def test_a_join_exports_its_output_watermark():
    row = ROW | {"output_watermark": 75.0}  # held back below W = 90 by a buffered row
    assert _by(samples(row, TOTALS), "lowwater_output_watermark_seconds") == {(): 75.0}
    assert progress_figures(row, TOTALS)["output_watermark_s"] == 75.0


def test_undefined_watermark_has_no_sample_and_several_sources_split_names():
    row = ROW | {"low_watermark": None, "watermark_lag_s": None,
                 "partition_watermarks": [("orders/0", _ts(5)), ("pay/0", None)],
                 "source_watermarks": [("orders", _ts(5))]}
    out = samples(row, TOTALS, several=True)
    assert _by(out, "lowwater_low_watermark_seconds") == {}
    assert _by(out, "lowwater_watermark_lag_seconds") == {}
    assert _by(out, "lowwater_watermark_seconds") == {(("source", "orders"), ("partition", "0")): 5.0}
    assert _by(out, "lowwater_source_watermark_seconds") == {(("source", "orders"),): 5.0}


@pytest.mark.parametrize(("name", "several", "expected"), [
    ("0", False, ("src", "0")),            # one source: the name is the partition
    ("a/b", False, ("src", "a/b")),        # ... even with a slash in it
    ("orders/3", True, ("orders", "3")),   # several: source/partition
])
def test_split_name(name, several, expected):
    assert split_name(name, "src", several) == expected


def test_late_rate_without_valid_rows_is_undefined():
    assert late_rate({"rows": 3, "dead_letter": 3, "too_late": 0}) is None


def test_histogram_is_cumulative():
    h = Histogram()
    for d in (0.05, 0.3, 0.3, 700.0):
        h.observe(d)
    cum = dict(h.cumulative())
    assert cum["0.1"] == 1 and cum["0.5"] == 3 and cum["300.0"] == 3 and cum["+Inf"] == 4
    assert h.total == pytest.approx(700.65)


def test_progress_figures_are_flat_scalars():
    p = progress_figures(ROW, TOTALS)
    assert p["low_watermark_s"] == 90.0 and p["too_late"] == 2.0 and p["holding_partition"] == "b"
    assert p["idle_partitions"] == "c" and p["late_rate"] == 2 / 190
    assert all(v is None or isinstance(v, float | str) for v in p.values())


def test_docs_list_every_figure():
    from pathlib import Path

    docs = (Path(__file__).parents[2] / "docs" / "observability.md").read_text()
    assert [f.name for f in FIGURES if f"`{f.name}`" not in docs] == []
