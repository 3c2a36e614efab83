"""Arrival order: the shortcuts (already sorted, sorted by arrival with ties) equal a plain lexsort."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lowwater.core.judge import arrival_order


@st.composite
def batches(draw):
    n = draw(st.integers(0, 40))
    ints = st.lists(st.integers(0, 4), min_size=n, max_size=n)
    arrival = np.array(draw(ints), dtype=np.int64)
    if draw(st.booleans()):
        arrival = np.sort(arrival)  # the usual case: a file in arrival order, with ties
    partition = np.array(draw(ints), dtype=np.int64)
    if draw(st.booleans()):
        partition = partition.astype(str)
    offset = np.array(draw(ints), dtype=np.int64)
    rid = np.array(draw(st.permutations(range(n))), dtype=np.int64) if n else np.zeros(0, np.int64)
    if draw(st.booleans()):
        rid = np.sort(rid)
    return arrival, partition, offset, rid


@settings(max_examples=400, deadline=None)
@given(batches())
def test_arrival_order_equals_a_plain_lexsort(batch):
    arrival, partition, offset, rid = batch
    n = len(arrival)
    codes = np.unique(partition, return_inverse=True)[1] if n else partition
    want = np.lexsort([rid, offset, codes, arrival]) if n else np.zeros(0, np.int64)
    assert arrival_order(n, arrival, partition, offset, [rid]).tolist() == want.tolist()
    # Without an arrival clock: the source's own order alone.
    want = np.lexsort([rid, arrival]) if n else want
    assert arrival_order(n, None, None, None, [arrival, rid]).tolist() == want.tolist()
