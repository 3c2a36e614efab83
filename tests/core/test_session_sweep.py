"""The what-if sweep for session windows by hand (core/session_sweep.py).

Gap 10s, one partition; (key, event s) in arrival order:

    a@0  a@15  b@26  a@8  b@60
    L = 0 : W(a@8) = 26; a's [0, 10) and [15, 25) fired at 26; a@8 bridges them (C = [0, 25)):
            G = 0 too late, G = 20 a late update (revision)
    L = 10: W(a@8) = 16; [0, 10) fired (and with G = 0 freed); C ends at 25 > 16: on time
"""

from __future__ import annotations

import numpy as np
import pytest

from lowwater.advisor.session_sweep import SessionSweep
from lowwater.advisor.sweep import FIELDS
from lowwater.core.watermarks import WatermarkStrategy
from lowwater.core.windows import SessionWindows

S = 1_000_000
EVENTS = np.array([0, 15, 26, 8, 60]) * S
KEYS = np.array([1, 1, 2, 1, 2])


def sweep(bounds, graces, chunks=(5,)):
    s = SessionSweep(WatermarkStrategy(), SessionWindows(10 * S), [b * S for b in bounds], [g * S for g in graces])
    parts = np.array(["0"] * len(EVENTS))
    lo = 0
    for hi in np.cumsum(chunks):
        s.feed(parts[lo:hi], EVENTS[lo:hi], KEYS[lo:hi], dead_letter=1 if lo == 0 else 0)
        lo = hi
    return {(r["lateness"], r["allowed_lateness"]): r for r in s.results()}


def test_hand_computed_grid():
    r = sweep([0, 10], [0, 20])
    assert all(set(x) == set(FIELDS) for x in r.values())
    verdicts = {k: (v["on_time"], v["late_updates"], v["too_late"]) for k, v in r.items()}
    assert verdicts == {(0, 0): (4, 0, 1), (0, 20): (4, 1, 0), (10, 0): (5, 0, 0), (10, 20): (5, 0, 0)}
    assert r[(0, 0)]["too_late_by_partition"] == {"0": 1}
    assert r[(0, 0)]["rows"] == 6 and r[(0, 0)]["dead_letter"] == 1
    assert r[(0, 0)]["completeness"] == pytest.approx(4 / 5)
    # L = 0: a's two sessions fire before a@8 (max seen 26: latencies 16 and 1); b's [26, 36)
    # fires at the end (W = 60, max seen 60: latency 24); b@60's session only by a drain.
    assert (r[(0, 0)]["windows_fired"], r[(0, 0)]["windows_drain_only"]) == (3, 1)
    assert r[(0, 0)]["emit_latency_mean"] == pytest.approx((16 + 1 + 24) / 3)
    # L = 10: W(a@8) = 16 fires [0, 10) first. G = 0 frees it too, so a@8 joins [15, 25) alone
    # and [8, 25) is a final of its own; G = 20 keeps it, a@8 merges into [0, 25): a revision.
    assert (r[(10, 0)]["windows_fired"], r[(10, 0)]["windows_drain_only"]) == (3, 1)
    assert (r[(10, 20)]["windows_fired"], r[(10, 20)]["windows_drain_only"]) == (2, 1)


def test_chunking_does_not_change_the_verdicts():
    one, many = sweep([0, 10], [0, 20]), sweep([0, 10], [0, 20], chunks=(1, 2, 1, 1))
    for k in one:
        for f in ("rows", "on_time", "late_updates", "too_late", "windows_fired", "windows_drain_only"):
            assert one[k][f] == many[k][f], (k, f)


@pytest.mark.parametrize(
    ("batch_ids", "chunks", "peak"),
    [
        (None, (5,), 1),  # one micro-batch: W = 60 at its end frees all but b's [60, 70)
        ([0, 1, 2, 3, 4], (5,), 3),  # after b@26 (W = 26): a's [0, 10), [15, 25) and b's [26, 36)
        ([0, 0, 0, 1, 1], (2, 3), 3),  # the same batch end, the batch spanning two chunks
        ([0, 0, 0, 0, 1], (5,), 2),  # a@8 merged a's two sessions before the batch ended
    ],
)
def test_peak_live_sessions_at_micro_batch_ends(batch_ids, chunks, peak):
    """L = 0, G = 20: sessions are freed at the end of a micro-batch once end + 20 <= W (the engine's open_windows)."""
    s = SessionSweep(WatermarkStrategy(), SessionWindows(10 * S), [0], [20 * S])
    parts = np.array(["0"] * len(EVENTS))
    ids = None if batch_ids is None else np.array(batch_ids)
    lo = 0
    for hi in np.cumsum(chunks):
        s.feed(parts[lo:hi], EVENTS[lo:hi], KEYS[lo:hi], batch_ids=None if ids is None else ids[lo:hi])
        lo = hi
    r = s.results()[0]
    assert r["peak_open_windows"] == peak
    assert (r["on_time"], r["late_updates"], r["too_late"]) == (4, 1, 0)  # the cut changes no verdict
