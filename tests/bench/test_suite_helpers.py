"""The benchmark's independent references (no Spark): the watermark after each
file and the window state the semantics require, on a log small enough to
count by hand."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from bench.suite import required_state, watermarks_after

S = 1_000_000


def log(rows):
    part, event, key = zip(*rows, strict=True)
    return pa.table({
        "partition": pa.array(part, pa.int32()),
        "event_time": pa.array([e * S for e in event], pa.timestamp("us", tz="UTC")),
        "key": pa.array(key),
    })


ROWS = [  # partition, event s, key -- in arrival order
    (0, 1, "a"), (1, 2, "b"),  # file 0: W = min(1, 2) - 1 = 0
    (0, 12, "a"), (1, 11, "a"),  # file 1: W = 11 - 1 = 10: [0, 10) may be freed (G = 0)
    (0, 9, "b"), (1, 25, "c"),  # file 2: W = 12 - 1 = 11; the row at 9 s is too late
]
ENDS = [2, 4, 6]


def test_watermark_is_the_min_over_partitions_minus_L_and_never_falls():
    w = watermarks_after(log(ROWS), ENDS, 1 * S)
    assert w.tolist() == [0, 10 * S, 11 * S]
    # Undefined (-inf) until every partition has reported.
    w = watermarks_after(log(ROWS), [1, 2], 0)
    assert np.isneginf(w[0]) and w[1] == 1 * S


def test_required_state_counts_live_key_windows():
    t = log(ROWS)
    w = watermarks_after(t, ENDS, 1 * S)
    # after file 0: (a,[0,10)), (b,[0,10)); after file 1 (W = 10): only (a,[10,20));
    # after file 2 (W = 11): (a,[10,20)), (c,[20,30)); the too-late row holds nothing.
    assert required_state(t, ENDS, w, 10 * S, 0).tolist() == [2, 1, 2]
    # With a grace of 5 s the windows ending at 10 s stay until W >= 15; the row at 9 s
    # is then a late update of (b,[0,10)), which is already held.
    assert required_state(t, ENDS, w, 10 * S, 5 * S).tolist() == [2, 3, 4]
