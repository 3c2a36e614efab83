"""approx_count_distinct and approx_percentile (ADR 0034): a DataSketches HLL / KLL sketch in the sum field of its
input, "added" by union / merge.

Small sets are exact (the sketch keeps a list of hashes), so any cut in any order merges to the one-batch value;
large ones are within the sketch's documented error (lg K 12: relative standard error about 1.6 %, checked at 3σ).
"""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from lowwater.core import partials
from lowwater.core.aggregates import AggSpec, input_index, value_inputs
from lowwater.core.panes import Agg, Pane
from lowwater.core.partials import HLL, empty, merge_into, merged, output
from lowwater.core.triggers import AccumulationMode

values = st.lists(st.one_of(st.none(), st.integers(-20, 20)), max_size=12)
SPECS = [AggSpec("d", "approx_count_distinct", "v")]
INPUTS = value_inputs(SPECS)
RSE = 1.04 / 2 ** (partials.HLL_LG_K / 2)  # HLL's relative standard error at lg K 12 (~1.6 %)


def partial_of(vs: list) -> list:
    p = empty(len(INPUTS))
    for v in vs:
        partials.add_row_where(p, [partials.input_value(v, of) for _, of in INPUTS], [of == HLL for _, of in INPUTS])
    return p


def estimate(p: list) -> int:
    return output("approx_count_distinct", p, input_index(INPUTS, SPECS[0]))


def exact(vs: list) -> int:
    return len({v for v in vs if v is not None})


@given(vs=values, cuts=st.lists(st.integers(0, 12), max_size=4), order=st.randoms())
def test_any_cut_in_any_order_merges_to_the_one_batch_value(vs, cuts, order):
    bounds = [0, *sorted(c for c in cuts if c < len(vs)), len(vs)]
    pieces = [partial_of(vs[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    order.shuffle(pieces)
    p = empty(len(INPUTS))
    for q in pieces:
        merge_into(p, q)
    assert estimate(p) == estimate(partial_of(vs)) == exact(vs)  # small: exact


@given(a=values, b=values, c=values)
def test_merge_is_associative_and_commutative(a, b, c):
    x, y, z = partial_of(a), partial_of(b), partial_of(c)
    assert estimate(merged(merged(x, y), z)) == estimate(merged(x, merged(y, z))) == exact(a + b + c)
    assert estimate(merged(x, y)) == estimate(merged(y, x))


def test_a_large_count_is_within_the_documented_error_for_every_cut():
    rnd = random.Random(35)
    vs = [rnd.randrange(10**9) for _ in range(30_000)]
    truth = exact(vs)
    for n_cuts in (0, 3, 17):
        bounds = [0, *sorted(rnd.sample(range(1, len(vs)), n_cuts)), len(vs)]
        p = empty(len(INPUTS))
        for lo, hi in zip(bounds, bounds[1:], strict=False):  # each piece sketched at once, as the executors do
            q = empty(len(INPUTS))
            q[partials.position(partials.SUM, 1)] = partials.Sketch(partials.hll_bytes(vs[lo:hi]))
            merge_into(p, q)
        assert abs(estimate(p) - truth) <= 3 * RSE * truth, (n_cuts, estimate(p), truth)
    assert estimate(empty(len(INPUTS))) == 0  # Spark's value over no row


def test_a_revision_and_its_retraction_carry_the_estimates():
    def one(v: object) -> Agg:
        p = partial_of([v])
        return Agg(p[0], *p[5:9])  # the HLL input's fields

    pane = Pane(AccumulationMode.RETRACTING)
    for v in (1, 2, 2):
        pane.admit(one(v), now_us=0)
    assert [x.value.total.estimate() for x in pane.fire()] == [2]
    assert [(str(x.kind), x.value.total.estimate()) for x in pane.late(one(3))] == [("retraction", 2), ("revision", 3)]


PSPECS = [AggSpec("m", "approx_percentile", "v", 0.5), AggSpec("q", "approx_percentile", "v", 0.9)]
PINPUTS = value_inputs(PSPECS)


def sketch_of(vs: list) -> list:
    p = empty(len(PINPUTS))
    for v in vs:
        partials.add_row_where(p, [partials.input_value(v, of) for _, of in PINPUTS],
                               [of != "" for _, of in PINPUTS])
    return p


def quantiles(p: list) -> dict[str, object]:
    return {s.name: output(s.func, p, input_index(PINPUTS, s), s.fraction) for s in PSPECS}


def ranked(vs: list, p: float) -> float | None:
    """The quantile of a small set (KLL keeps every value up to k) by the inclusive search of Spark's
    ``kll_sketch_get_quantile_double``: the first value with at least a fraction p of the values at or below it
    (the smallest for p = 0)."""
    xs = sorted(float(v) for v in vs if v is not None)
    if not xs:
        return None
    return next(x for i, x in enumerate(xs, 1) if i / len(xs) >= p)


def test_the_percentile_grammar():
    assert AggSpec.parse("m", "approx_percentile(amount, 0.25)") == AggSpec("m", "approx_percentile", "amount", 0.25)
    assert AggSpec("m", "approx_percentile", "amount", 0.25).text == "approx_percentile(amount, 0.25)"
    for bad in ("approx_percentile(amount)", "approx_percentile(amount, 1.5)", "sum(amount, 0.5)"):
        try:
            AggSpec.parse("m", bad)
        except ValueError as e:
            assert "\n" not in str(e)
        else:
            raise AssertionError(bad)


@given(vs=values, cuts=st.lists(st.integers(0, 12), max_size=4), order=st.randoms())
def test_percentiles_of_any_cut_in_any_order_are_the_one_batch_value(vs, cuts, order):
    bounds = [0, *sorted(c for c in cuts if c < len(vs)), len(vs)]
    pieces = [sketch_of(vs[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    order.shuffle(pieces)
    p = empty(len(PINPUTS))
    for q in pieces:
        merge_into(p, q)
    assert quantiles(p) == quantiles(sketch_of(vs)) == {"m": ranked(vs, 0.5), "q": ranked(vs, 0.9)}


def test_a_large_percentile_is_within_the_documented_rank_error_for_every_cut():
    rnd = random.Random(36)
    vs = [rnd.gauss(0, 1) for _ in range(20_000)]
    xs = sorted(vs)
    for n_cuts in (0, 5, 40):
        bounds = [0, *sorted(rnd.sample(range(1, len(vs)), n_cuts)), len(vs)]
        p = empty(len(PINPUTS))
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            q = empty(len(PINPUTS))
            q[partials.position(partials.SUM, 1)] = partials.Quantiles(partials.kll_bytes(vs[lo:hi]))
            merge_into(p, q)
        for name, frac in (("m", 0.5), ("q", 0.9)):
            rank = xs.index(quantiles(p)[name]) / len(xs)
            assert abs(rank - frac) <= 0.0165 * 2, (n_cuts, name, rank)  # k 200: ~1.65 % at 99 % confidence
