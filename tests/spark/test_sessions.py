"""Session windows through the real engine (issue 6): scenario tables, fold per
accumulation mode, and SEMANTICS.md §8 with random batch cuts.

Times are seconds; gap 10s; one partition unless said, so ``W(r)`` is the
largest event time before ``r`` minus ``L``. The same cases as
tests/core/test_sessions.py, as rows in arrival order.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lowwater.testing.outputs import read_output
from lowwater.testing.scenario import base_config, run_scenario

from .helpers import emitted, late_rows
from .test_determinism import random_logs

pytestmark = pytest.mark.spark

COUNTS = ("rows", "on_time", "late_updates", "too_late", "dead_letter", "windows_fired", "revisions")


def fold(rows: list[tuple], mode: str) -> tuple[int, float]:
    """(count, total) of a window from its emissions, in emission order (revision, retractions first)."""
    order = sorted(rows, key=lambda e: (e[-1], e[-2] != "retraction"))
    if mode == "accumulating":
        last = order[-1]
        return last[3], last[4]
    if mode == "discarding":
        return sum(e[3] for e in order), sum(e[4] for e in order)
    n = t = 0
    for e in order:  # retracting: add values, subtract retractions
        sign = -1 if e[-2] == "retraction" else 1
        n, t = n + sign * e[3], t + sign * e[4]
    return n, t


def session_config(gap="10s", grace="0s", bound="0s", mode="accumulating", **window) -> dict:
    cfg = base_config(
        watermark={"max_out_of_orderness": bound},
        window={"type": "session", "gap": gap, "allowed_lateness": grace, "accumulation": mode, **window},
    )
    cfg["window"].pop("size")
    return cfg


def rows_of(spec: list[tuple]) -> list[dict]:
    """(key, event s, amount) in arrival order, all on partition 0."""
    return [{"partition": "0", "offset": i, "event_time": float(t), "key": k, "amount": float(a)}
            for i, (k, t, a) in enumerate(spec)]


def same_under_cuts(a, b) -> None:
    assert b.emissions() == a.emissions()
    assert b.late_rows() == a.late_rows()
    for k in COUNTS:
        assert b.summary[k] == a.summary[k], k


# a@0 and a@15 are two sessions; b@26 moves W to 26 and both fire; a@8 bridges them
# (C = [0, 25), 25 <= W = 26): within grace 20s a revision of the merged session.
# a@30 opens [30, 40); a@22 (W(r) = 30) bridges the revised [0, 25) and [30, 40):
# C = [0, 40) ends after W, so it is on time and fires with the drain as revision 2.
BRIDGE = rows_of([("a", 0, 1), ("a", 15, 2), ("b", 26, 4), ("a", 8, 8), ("a", 30, 16), ("a", 22, 32)])

EXPECTED = {
    "accumulating": [
        ("a", 0, 10, 1, 1.0, "final", 0),
        ("a", 0, 25, 3, 11.0, "revision", 1),
        ("a", 0, 40, 5, 59.0, "revision", 2),
        ("a", 15, 25, 1, 2.0, "final", 0),
    ],
    "discarding": [
        ("a", 0, 10, 1, 1.0, "final", 0),
        ("a", 0, 25, 1, 8.0, "revision", 1),  # only the bridging row
        ("a", 0, 40, 2, 48.0, "revision", 2),  # a@30 and a@22
        ("a", 15, 25, 1, 2.0, "final", 0),
    ],
    "retracting": [
        ("a", 0, 10, 1, 1.0, "final", 0),
        ("a", 0, 10, 1, 1.0, "retraction", 0),  # the merge withdraws both fired sessions
        ("a", 0, 25, 3, 11.0, "retraction", 1),
        ("a", 0, 25, 3, 11.0, "revision", 1),
        ("a", 0, 40, 5, 59.0, "revision", 2),
        ("a", 15, 25, 1, 2.0, "final", 0),
        ("a", 15, 25, 1, 2.0, "retraction", 0),
    ],
}


@pytest.mark.parametrize("mode", ["accumulating", "discarding", "retracting"])
def test_late_bridging_row_merges_fired_sessions_and_folds(spark, mode):
    cfg = session_config(grace="20s", mode=mode)
    o = run_scenario(spark, cfg, BRIDGE)
    a = [e for e in emitted(o, "total") if e[0] == "a"]
    assert a == EXPECTED[mode]
    assert [e for e in emitted(o, "total") if e[0] == "b"] == [("b", 26, 36, 1, 4.0, "final", 0)]
    s = o.summary
    assert (s["rows"], s["on_time"], s["late_updates"], s["too_late"], s["balanced"]) == (6, 5, 1, 0, True)
    assert (s["windows_fired"], s["revisions"]) == (3, 2)
    # Fold as the mode prescribes = the batch recomputation over the session's admitted rows.
    assert fold(a, mode) == (5, 59.0)
    if mode == "retracting":  # the most stateful mode, under a cut between every row
        same_under_cuts(o, run_scenario(spark, cfg, BRIDGE, cuts=[3, 5]))


def test_too_late_bridging_row_goes_to_the_side_output_and_leaves_sessions_untouched(spark):
    # Without grace both sessions were freed at W = 26; C = [8, 18) ends before W: too late.
    cfg = session_config()
    o = run_scenario(spark, cfg, BRIDGE[:4])
    assert emitted(o, "total") == [
        ("a", 0, 10, 1, 1.0, "final", 0),
        ("a", 15, 25, 1, 2.0, "final", 0),
        ("b", 26, 36, 1, 4.0, "final", 0),
    ]
    assert late_rows(o) == [("0", 8.0, 8, 18, 26)]  # its proto-window and W(r)
    assert o.late.iloc[0]["amount"] == 8.0 and o.late.iloc[0]["key"] == "a"  # the whole input row
    s = o.summary
    assert (s["on_time"], s["late_updates"], s["too_late"], s["balanced"]) == (3, 0, 1, True)
    same_under_cuts(o, run_scenario(spark, cfg, BRIDGE[:4], cuts=[2, 3]))


# L = 10s, G = 10s. W(r) = max event before r - 10.
#   d@0, d@15, d@8 (W = 5): the bridge comes before W passes either end: one final [0, 25).
#   a@0, c@0 (W = 5); x@22 -> W = 12 fires a [0, 10) and c [0, 10).
#   a@5 (W = 12): C = [0, 15) ends after W: on time, fires as revision 1 when W >= 15.
#   c@1 (W = 12): C = [0, 11) ends at or before W: a late update, revision 1 at once.
#   y@30 -> W = 20.
EXTENDED = rows_of([("d", 0, 1), ("d", 15, 1), ("d", 8, 1), ("a", 0, 1), ("c", 0, 1), ("x", 22, 1),
                    ("a", 5, 2), ("c", 1, 2), ("y", 30, 1)])


def test_on_time_bridge_and_sessions_extended_after_firing(spark):
    cfg = session_config(grace="10s", bound="10s")
    o = run_scenario(spark, cfg, EXTENDED)
    assert emitted(o, "total") == [
        ("a", 0, 10, 1, 1.0, "final", 0),
        ("a", 0, 15, 2, 3.0, "revision", 1),
        ("c", 0, 10, 1, 1.0, "final", 0),
        ("c", 0, 11, 2, 3.0, "revision", 1),
        ("d", 0, 25, 3, 3.0, "final", 0),
        ("x", 22, 32, 1, 1.0, "final", 0),
        ("y", 30, 40, 1, 1.0, "final", 0),
    ]
    s = o.summary
    assert (s["on_time"], s["late_updates"], s["too_late"], s["balanced"]) == (8, 1, 0, True)
    cut = run_scenario(spark, cfg, EXTENDED, cuts=[3, 6, 8])
    same_under_cuts(o, cut)
    # When differs: c's revision is emitted in the step of c@1, a's only once W reaches 15.
    by_step = {(r.key, r.kind): r.batch_id for r in cut.results.itertuples()}
    assert by_step[("c", "revision")] == 2 and by_step[("a", "revision")] == 3


@st.composite
def session_logs(draw):
    cfg, rows, cuts = draw(random_logs())
    cfg["window"] = {
        "type": "session",
        "gap": draw(st.sampled_from(["3s", "10s"])),
        "allowed_lateness": draw(st.sampled_from(["0s", "4s", "15s"])),
        "accumulation": draw(st.sampled_from(["accumulating", "discarding", "retracting"])),
        "key": ["key"],
        "aggregations": {"total": "sum(amount)", "low": "min(amount)", "high": "max(amount)"},
    }
    return cfg, rows, cuts


@settings(
    max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(case=session_logs())
def test_random_cuts_give_identical_session_results(spark, case):
    cfg, rows, cuts = case
    whole = run_scenario(spark, cfg, rows)
    cut = run_scenario(spark, cfg, rows, cuts=cuts)
    assert whole.summary["balanced"] and cut.summary["balanced"]
    assert whole.summary["rows"] == len(rows)
    same_under_cuts(whole, cut)


def test_whatif_equals_run_once_drain(spark, tmp_path):
    from lowwater.advisor.whatif import SweepSpec, run_whatif
    from lowwater.config import parse_config

    cfg = session_config(grace="10s", bound="10s")
    # z@40 moves W to 30: a's [0, 15) and c's [0, 11) are freed (end + 10 <= 30), so a@3 and c@2 are too late.
    rows = EXTENDED + rows_of([("z", 40, 1), ("a", 3, 1), ("c", 2, 1)])
    engine = run_scenario(spark, cfg, rows, cuts=[4, 9], workdir=tmp_path)
    s = 1_000_000
    # run_scenario reads one file per micro-batch: max_files_per_batch = 1 cuts the replay the same way.
    replay = {**cfg, "source": {**cfg["source"], "max_files_per_batch": 1}}
    grid = run_whatif(spark, parse_config(replay, base_dir=tmp_path), SweepSpec([0, 10 * s], [0, 10 * s], chunk_rows=4))
    r = {(x["lateness"], x["allowed_lateness"]): x for x in grid}[(10.0, 10.0)]
    for k in ("rows", "on_time", "late_updates", "too_late", "dead_letter"):
        assert r[k] == engine.summary[k], k
    assert engine.summary["too_late"] == 2
    assert r["windows_fired"] + r["windows_drain_only"] == engine.summary["windows_fired"]
    assert r["too_late_by_partition"] == {"0": 2}
    assert r["peak_open_windows"] == int(engine.metrics["open_windows"].max())  # live sessions at batch ends


EARLY = rows_of([("a", 0, 1), ("a", 1, 2), ("a", 2, 4), ("a", 3, 8), ("a", 4, 16)])


def signed_fold(rows: list[tuple], mode: str) -> tuple[int, float]:
    """(count, total) of one session from all its emissions (provisional ones included)."""
    if mode == "accumulating":
        (final,) = [e for e in rows if e[5] == "final"]
        return final[3], final[4]
    n, t = 0, 0.0
    for e in rows:
        sign = -1 if e[5] == "retraction" else 1
        n, t = n + sign * e[3], t + sign * (0.0 if e[4] != e[4] or e[4] is None else e[4])
    return n, t


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("accumulating", [(0, 12, 3, 7.0, "provisional", 0), (0, 14, 5, 31.0, "final", 0),
                          (0, 14, 5, 31.0, "provisional", 0)]),
        ("discarding", [(0, 12, 3, 7.0, "provisional", 0), (0, 14, 0, None, "final", 0),  # owed, empty
                        (0, 14, 2, 24.0, "provisional", 0)]),
        ("retracting", [(0, 12, 3, 7.0, "provisional", 0), (0, 12, 3, 7.0, "retraction", 0),
                        (0, 14, 5, 31.0, "final", 0), (0, 14, 5, 31.0, "provisional", 0),
                        (0, 14, 5, 31.0, "retraction", 0)]),
    ],
)
def test_early_firings_in_each_mode_fold_to_the_batch_value(spark, mode, expected):
    # L = 100s keeps every session open until the drain; "every 2 rows" is due after the first
    # step (3 pending) and the third (2 pending since the provisional), not after the second.
    cfg = session_config(bound="100s", mode=mode)
    cfg["trigger"] = {"early": "every 2 rows"}
    o = run_scenario(spark, cfg, EARLY, cuts=[3, 4])
    got = [(e[1], e[2], e[3], None if e[4] != e[4] else e[4], e[5], e[6]) for e in emitted(o, "total")]
    assert got == expected
    assert signed_fold(emitted(o, "total"), mode) == (5, 31.0)  # the batch recomputation: 1+2+4+8+16
    assert (o.summary["windows_fired"], o.summary["revisions"], o.summary["balanced"]) == (1, 0, True)


def test_replayed_batch_redoes_the_same_step_from_the_same_state(spark, tmp_path):
    # A crash after the manifest commit of Spark batch 1 but before Spark's own commit: a
    # restarted engine gets batch 1 again, must redo step 1 from step 0's state, and end
    # up with what an uninterrupted run writes.
    import json

    from lowwater.config import parse_config
    from lowwater.io.files import read_batch
    from lowwater.spark.engine import Engine

    cfg = session_config(grace="20s", mode="retracting")
    clean = run_scenario(spark, cfg, BRIDGE, cuts=[3, 5])
    landing = tmp_path / "landing"
    landing.mkdir()
    files = []
    for i, (lo, hi) in enumerate([(0, 3), (3, 5), (5, 6)]):
        f = landing / f"part-{i:05d}.jsonl"
        f.write_text("".join(json.dumps(r) + "\n" for r in BRIDGE[lo:hi]))
        files.append(str(f))
    parsed_cfg = parse_config(cfg, base_dir=tmp_path)
    first = Engine(parsed_cfg, spark)
    for i in (0, 1):
        first.process_batch(read_batch(spark, parsed_cfg.source, first.schema, path=files[i]), i)
    restarted = Engine(parsed_cfg, spark)
    for i in (1, 2):
        restarted.process_batch(read_batch(spark, parsed_cfg.source, restarted.schema, path=files[i]), i)
    summary = restarted.summary(restarted.drain())
    results = read_output(spark, tmp_path / "out" / "results")
    cols = [c for c in results.columns if c not in ("batch_id", "watermark")]
    got = sorted(tuple(r) for r in results[cols].itertuples(index=False))
    assert got == sorted(tuple(r) for r in clean.results[cols].itertuples(index=False))
    for k in COUNTS:
        assert summary[k] == clean.summary[k], k
