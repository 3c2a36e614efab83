"""The aggregates beyond count/sum/min/max/avg (ADR 0034): each is read from the one partial layout over its value
inputs, so any cut of the rows merges to the one-batch value, in any order and grouping, and a retraction undoes it.

``count_if`` reads the non-null count of the input "1 where true"; the variances and standard deviations read the
moments (non-null count, sum, and the sum of the squares input).
"""

from __future__ import annotations

import math
import statistics
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lowwater.core import partials
from lowwater.core.aggregates import ALIASES, FUNCTIONS, AggSpec, input_index, type_problem, value_inputs
from lowwater.core.partials import empty, merge_into, merged, output, signed_sum

NAN = math.nan
MOMENTS = ("var_samp", "var_pop", "stddev_samp", "stddev_pop")
NEW = ("count_if", *MOMENTS, "first_by_time", "last_by_time", "count_distinct", "collect_set", "collect_list",
       "approx_count_distinct", "approx_percentile")

# One row: an integer amount (exact moments), a double amount and a flag; None is null.
row = st.tuples(st.one_of(st.none(), st.integers(-10**6, 10**6)),
                st.one_of(st.none(), st.integers(-1000, 1000).map(lambda x: x / 8)),
                st.one_of(st.none(), st.booleans()))
rows = st.lists(row, max_size=12)
SPECS = [AggSpec("c", "count_if", "flag"),
         *[AggSpec(f"i_{f}", f, "qty") for f in MOMENTS], *[AggSpec(f"d_{f}", f, "amount") for f in MOMENTS]]
COLUMNS = {"qty": 0, "amount": 1, "flag": 2}
INPUTS = value_inputs(SPECS)


def partial_of(rs: list[tuple]) -> list:
    """The partial of ``rs`` over :data:`INPUTS`, as every path folds it (``partials.input_value`` per input)."""
    p = empty(len(INPUTS))
    for r in rs:
        partials.add_row(p, [partials.input_value(r[COLUMNS[c]], of) for c, of in INPUTS])
    return p


def results(p: list) -> dict[str, object]:
    return {s.name: output(s.func, p, input_index(INPUTS, s)) for s in SPECS}


def expected(rs: list[tuple]) -> dict[str, object]:
    """Straight from the rows: Python's exact statistics (Fractions), Spark's nulls (no value; var_samp of one)."""
    out: dict[str, object] = {"c": sum(1 for r in rs if r[2] is True)}
    for prefix, col in (("i", 0), ("d", 1)):
        vs = [Fraction(r[col]) for r in rs if r[col] is not None]
        for f in MOMENTS:
            sample = f.endswith("_samp")
            if len(vs) < (2 if sample else 1):
                out[f"{prefix}_{f}"] = None
                continue
            var = float(statistics.variance(vs) if sample else statistics.pvariance(vs))
            out[f"{prefix}_{f}"] = math.sqrt(var) if f.startswith("stddev") else var
    return out


def close(got: dict, want: dict) -> bool:
    """Equal; floats to the moments' rounding: a few ulps of the squares' sum (``partials._squares_about_mean``)."""
    for k, w in want.items():
        g = got[k]
        if w is None or g is None or isinstance(w, int):
            if g != w:
                return False
        elif not math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-9):
            return False
    return True


def test_the_registry_and_spark_names():
    assert FUNCTIONS == ("count", "sum", "min", "max", "avg", *NEW)
    assert ALIASES == {"stddev": "stddev_samp", "std": "stddev_samp", "variance": "var_samp"}
    assert AggSpec.parse("sd", "STDDEV(amount)") == AggSpec("sd", "stddev_samp", "amount")
    assert AggSpec.parse("v", "variance(amount)").func == "var_samp"
    with pytest.raises(ValueError, match="is not one of"):
        AggSpec.parse("c", "count_if(amount > 100)")  # a boolean column, not an expression (ADR 0034)


def test_value_inputs_keep_the_columns_first_so_an_old_layout_is_unchanged():
    specs = [AggSpec("t", "sum", "amount"), AggSpec("sd", "stddev_samp", "amount"), AggSpec("c", "count_if", "ok"),
             AggSpec("n", "count", "qty")]
    assert value_inputs(specs) == [("amount", ""), ("ok", ""), ("qty", ""), ("amount", "square"), ("ok", "true")]
    assert value_inputs(specs[:1] + specs[3:]) == [("amount", ""), ("qty", "")]


@pytest.mark.parametrize(("func", "type_name", "problem"), [
    ("count_if", "boolean", None),
    ("count_if", "int", "count_if(c) needs a boolean, but column 'c' is int"),
    ("stddev_samp", "decimal(12,2)", None),
    ("var_pop", "string", "var_pop(c) needs a number, but column 'c' is string"),
])
def test_types_each_new_aggregate_takes(func, type_name, problem):
    assert type_problem(AggSpec("x", func, "c"), type_name) == problem


@given(rs=rows)
def test_one_batch_is_the_exact_statistic(rs):
    assert close(results(partial_of(rs)), expected(rs))


@given(rs=rows, cuts=st.lists(st.integers(0, 12), max_size=4), order=st.randoms())
def test_any_cut_in_any_order_merges_to_the_one_batch_value(rs, cuts, order):
    bounds = [0, *sorted(c for c in cuts if c < len(rs)), len(rs)]
    pieces = [partial_of(rs[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    order.shuffle(pieces)
    p = empty(len(INPUTS))
    for q in pieces:
        merge_into(p, q)
    assert p == partial_of(rs)  # eighths: every sum of these doubles is exact, so the partial is equal
    assert close(results(p), expected(rs))


@given(a=rows, b=rows, c=rows)
def test_merge_is_associative_and_commutative_for_every_new_aggregate(a, b, c):
    pa_, pb, pc = partial_of(a), partial_of(b), partial_of(c)
    left, right = merged(merged(pa_, pb), pc), merged(pa_, merged(pb, pc))
    assert results(left) == results(right)  # the integer inputs are exact: equal, not close
    assert results(merged(pa_, pb)) == results(merged(pb, pa_))
    assert close(results(left), expected(a + b + c))


@given(kept=rows, taken=rows)
def test_a_retraction_takes_rows_back_out_exactly(kept, taken):
    """What a retracting consumer adds up: the full value with ``taken``, minus it, plus the value without."""
    full, rest = partial_of(kept + taken), partial_of(kept)
    back = signed_sum([(1, full), (-1, partial_of(taken))], len(INPUTS))
    got = results(back)
    assert got["c"] == results(rest)["c"]  # a count: exact
    for f in MOMENTS:  # the integer moments are exact sums: the same value
        assert got[f"i_{f}"] == results(rest)[f"i_{f}"]
    assert close({k: v for k, v in got.items() if k.startswith("d_")},
                 {k: v for k, v in expected(kept).items() if k.startswith("d_")})


def test_spark_nulls_and_the_moments_rounding_floor():
    one = partial_of([(7, 1.5, True)])
    assert results(one) == {"c": 1, **{f"{p}_{f}": (None if f.endswith("samp") else 0.0)
                                       for p in "id" for f in MOMENTS}}
    assert results(empty(len(INPUTS)))["c"] == 0  # count_if over no row is 0, as Spark's
    assert all(v is None for k, v in results(empty(len(INPUTS))).items() if k != "c")
    # Equal values: Σx² - (Σx)²/n may round below 0 in doubles; the variance is 0, never negative or NaN.
    same = partial_of([(None, 0.1, None)] * 3)
    assert results(same)["d_var_pop"] == 0.0 and results(same)["d_stddev_samp"] == 0.0


def test_the_configuration_refuses_a_count_if_of_a_number_in_one_line():
    from lowwater.config import ConfigError, check_columns, parse_config

    cfg = parse_config({"source": {"format": "jsonl", "path": "x", "partition": "p", "event_time": "t"},
                        "window": {"size": "10s", "aggregations": {"ok": "count_if(paid)", "sd": "stddev(amount)",
                                                                   "big": "count_if(amount)"}},
                        "output": {"path": "out"}})
    types = {"t": "bigint", "p": "string", "paid": "boolean", "amount": "double"}
    with pytest.raises(ConfigError, match=r"^window.aggregations.big: count_if\(amount\) needs a boolean, but "
                                          r"column 'amount' is double$"):
        check_columns(cfg, {"default": types})
    with pytest.raises(ConfigError, match=r"^window.aggregations.sd: stddev_samp\(amount\) needs a number"):
        check_columns(cfg, {"default": {**types, "amount": "string"}})
