"""count_distinct, collect_set, collect_list (ADR 0034): a collection kept in the sum field of its input.

"Adding" two collections is a set union (distinct values, sorted) or a merge of (event, arrival, value) entries in
their order, so any cut in any order merges to the one-batch value; nulls are skipped (Spark's rule); past
``COLLECTION_LIMIT`` values a merge fails loudly, never a silently cut collection.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lowwater.core import partials
from lowwater.core.aggregates import AggSpec, input_index, type_problem, value_inputs, windowed_only
from lowwater.core.panes import Agg, Pane
from lowwater.core.partials import COLLECTION_LIMIT, LIST, SET, empty, merge_into, merged, output
from lowwater.core.triggers import AccumulationMode

row = st.tuples(st.integers(0, 4), st.one_of(st.none(), st.integers(-5, 5)))
rows = st.lists(row, max_size=12)
SPECS = [AggSpec("n", "count_distinct", "v"), AggSpec("s", "collect_set", "v"), AggSpec("l", "collect_list", "v")]
INPUTS = value_inputs(SPECS)


def partial_of(rs: list[tuple[int, tuple]]) -> list:
    """The partial of ``(arrival position, (event, value))`` rows over :data:`INPUTS`."""
    p = empty(len(INPUTS))
    for a, (e, v) in rs:
        partials.add_row_where(p, [partials.input_value(v, of, (e, a)) for _, of in INPUTS],
                               [of in (SET, LIST) for _, of in INPUTS])
    return p


def results(p: list) -> dict[str, object]:
    return {s.name: output(s.func, p, input_index(INPUTS, s)) for s in SPECS}


def expected(rs: list[tuple[int, tuple]]) -> dict[str, object]:
    """Straight from the rows: distinct non-null values (sorted), every non-null value by (event, arrival)."""
    vs = {v for _, (_, v) in rs if v is not None}
    in_order = [v for (e, a), v in sorted(((e, a), v) for a, (e, v) in rs if v is not None)]
    return {"n": len(vs), "s": sorted(vs), "l": in_order}


def test_the_collection_inputs_and_their_types():
    assert INPUTS == [("v", ""), ("v", SET), ("v", LIST)]
    assert AggSpec.parse("d", "count_distinct(amount)") == AggSpec("d", "count_distinct", "amount")
    assert type_problem(AggSpec("s", "collect_set", "c"), "date") is None
    assert results(empty(len(INPUTS))) == {"n": 0, "s": [], "l": []}  # Spark's values over no row


@given(rs=rows)
def test_one_batch_is_the_collection(rs):
    assert results(partial_of(list(enumerate(rs)))) == expected(list(enumerate(rs)))


@given(rs=rows, cuts=st.lists(st.integers(0, 12), max_size=4), order=st.randoms())
def test_any_cut_in_any_order_merges_to_the_one_batch_value(rs, cuts, order):
    rs = list(enumerate(rs))
    bounds = [0, *sorted(c for c in cuts if c < len(rs)), len(rs)]
    pieces = [partial_of(rs[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    order.shuffle(pieces)
    p = empty(len(INPUTS))
    for q in pieces:
        merge_into(p, q)
    assert results(p) == expected(rs)


@given(a=rows, b=rows, c=rows)
def test_merge_is_associative_and_commutative(a, b, c):
    rs = list(enumerate(a + b + c))
    x, y, z = partial_of(rs[:len(a)]), partial_of(rs[len(a):len(a) + len(b)]), partial_of(rs[len(a) + len(b):])
    assert results(merged(merged(x, y), z)) == results(merged(x, merged(y, z))) == expected(rs)
    assert results(merged(x, y)) == results(merged(y, x))


def test_revisions_and_retractions_carry_the_whole_collection():
    pane = Pane(AccumulationMode.RETRACTING)
    for a, (e, v) in enumerate([(20, 2), (10, 1), (30, 2)]):
        pane.admit(Agg(*partial_of([(a, (e, v))])[:1], *partial_of([(a, (e, v))])[9:13]), now_us=0)
    assert [list(x.value.total.values()) for x in pane.fire()] == [[1, 2, 2]]
    got = pane.late(Agg(*partial_of([(3, (5, 7))])[:1], *partial_of([(3, (5, 7))])[9:13]))
    assert [(str(x.kind), x.revision, x.value.total.values()) for x in got] == [
        ("retraction", 0, [1, 2, 2]), ("revision", 1, [7, 1, 2, 2])]


def test_past_the_bound_a_merge_fails_in_one_line():
    big = partial_of([(a, (0, a)) for a in range(COLLECTION_LIMIT)])
    assert results(big)["n"] == COLLECTION_LIMIT
    with pytest.raises(OverflowError, match=rf"^lowwater: collection over its bound: one window's collection "
                                            rf"holds more than {COLLECTION_LIMIT} values$"):
        merged(big, partial_of([(COLLECTION_LIMIT, (0, -1))]))


def test_joins_refuse_collections_in_one_line():
    assert windowed_only(SPECS, "windows after a join").startswith(
        "n = count_distinct(v): windows after a join do not keep a collection's values in their state yet")
