"""Reconciliation rules (SEMANTICS.md §10): how a window's emissions fold, and when a difference is explained.

Pure: the Spark job (``lowwater/reconcile/``) builds its expressions from
these tables, and the core tests (and the differential test) hold them to a
row-by-row reading of the contract.

**The stream value of a window** is the fold of its emissions by the
accumulation mode (design.md, *Early firings and accumulation modes*). Each
output aggregate folds by one rule (:func:`rule`)::

    mode          count / sum / count(c) /      min / max          avg, variances, stddevs
                  count_if
    accumulating  latest                        latest             latest
    retracting    signed (+ emission, - retr.)  latest             latest
    discarding    add                           min / max          (none: a delta's cannot be merged)

``latest`` is the last non-retraction emission in emission order
(:func:`emission_order`: revision, then provisional before the others, then
the step).

**The explanation rule.** Every valid row of the log is in the batch truth of
its windows (its event time as written: the window a clipped row would have
had). The rows the stream could not have counted are put in one *cause* each,
per (row, window): ``in_flight`` (its file was not read yet, or the window has
not fired), ``clipped`` (its event time was moved by ``max_future_skew``, so
the stream counted it in another window: ``+`` here, ``-`` in the window it
was moved to), ``too_late`` (in ``late/``) or ``dropped`` (policy ``drop``,
recovered from the log). The *expected stream value* is the aggregate over
the remaining rows; a window is explained iff every aggregate of the stream
value equals the expected one (doubles to a relative 1e-9: sums of the same
doubles in another order). Otherwise the window is ``unexplained``: a defect
of lowwater or a tampered sink.

**Session windows** (:func:`fold_session`) are compared per *batch* session:
the stream may have emitted several intervals inside one (components merged
later, sessions split by freeing, sessions a too-late or unread row would
have bridged). Each interval folds by the mode; then the batch session's
value is the sum of every interval's deltas (``add``, ``signed``) and, for
``latest`` columns, the fold of the *heads*: the intervals whose latest value
still stands (:func:`heads`). Several heads' averages merge weighted by their
row counts, which is exact when no row of the column is null; else the
average is not compared (named as such). A variance, a by-time value, a
distinct count, a collection or a sketch is one head's value; over several
heads it is not compared (their partials are not emitted). Accumulating mode has no lineage
in its emissions: where a session split by freeing may have grown around its
earlier part, the window is explained by either reading (:func:`readings`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from lowwater.core.aggregates import BY_TIME_FUNCS, COLLECTIONS
from lowwater.core.pane_rules import RULES, Fold, rule_of
from lowwater.core.partial_values import HLL_LG_K, KLL_K

CAUSES = ("too_late", "dropped", "in_flight", "clipped")
"""Why a row of a window's batch truth is not in the stream's value, in the order a row is attributed."""

LATEST, SIGNED, ADD, MIN, MAX = Fold.LATEST.value, Fold.SIGNED.value, Fold.ADD.value, "min", "max"
KIND_RANK = {"retraction": -1, "provisional": 0, "final": 1, "revision": 1, "correction": 2}
REL_TOLERANCE = 1e-9
# A session's value over several heads (``LATEST``): an average weighted by rows; a variance not at all (its
# heads' means are not emitted), nor a by-time value, a distinct count, a collection or a sketch (ADR 0039: a
# head emits their finished value, not its partial; heads may overlap in time), so a batch session of several
# heads leaves them uncompared.
MERGED_BY_HEADS = ("avg", "var_samp", "var_pop", "stddev_samp", "stddev_pop", *BY_TIME_FUNCS, *COLLECTIONS)


def rule(mode: str, func: str) -> str | None:
    """How aggregate ``func`` (``count`` for the window's row count too) folds under ``mode``; None: it cannot.

    The mode's fold is its pane rule's (``core/pane_rules.py``); a retraction
    undoes counts and sums only, and deltas merge only as counts, sums, mins
    and maxes do.
    """
    if mode not in RULES:
        msg = f"unknown accumulation mode {mode!r}"
        raise ValueError(msg)
    how, additive = rule_of(mode).fold, func in ("count", "sum", "count_if")
    if how is Fold.LATEST:
        return LATEST
    if how is Fold.SIGNED:
        return SIGNED if additive else LATEST
    if additive:
        return ADD
    return {"min": MIN, "max": MAX}.get(func)


def emission_order(e: Mapping) -> tuple:
    """Sort key of a window's emissions: revision, provisional before final/revision/correction, then the step."""
    return (int(e["revision"]), KIND_RANK.get(str(e["kind"]), 1), int(e.get("batch_id") or 0))


def fold(mode: str, emissions: Iterable[Mapping], funcs: Mapping[str, str]) -> dict[str, object]:
    """The stream value of one window: ``{output column: value}`` for each of ``funcs`` (column -> function).

    ``emissions`` are the window's result rows (``kind``, ``revision``,
    ``batch_id`` and the output columns); a window with none folds to None.
    """
    rows = sorted(emissions, key=emission_order)
    full = [e for e in rows if e["kind"] != "retraction"]
    out: dict[str, object] = {}
    for col, func in funcs.items():
        r = rule(mode, func)
        if r is None or not rows:
            out[col] = None
        elif r == LATEST:
            out[col] = full[-1][col] if full else None
        elif r == SIGNED:
            out[col] = _total((-1 if e["kind"] == "retraction" else 1, e[col]) for e in rows)
        elif r == ADD:
            out[col] = _total((1, e[col]) for e in rows)
        else:
            vals = [e[col] for e in rows if e[col] is not None]
            out[col] = (min(vals) if r == MIN else max(vals)) if vals else None
    return out


def effective_revision(e: Mapping) -> int:
    """The revision an emission stands for: a provisional one carries its next final's number, so one less."""
    return int(e["revision"]) - (1 if e["kind"] == "provisional" else 0)


def heads(mode: str, intervals: Mapping[tuple[int, int], Sequence[Mapping]]) -> set[tuple[int, int]]:
    """The emitted intervals ``(start, end)`` of one batch session whose latest value still stands.

    ``retracting``: an interval with an emission not retracted (a merge
    retracts every value it replaces: the lineage is exact). ``accumulating``
    (and ``discarding``, whose additive folds do not need it): an interval not
    contained in another emitted interval of a later revision (a merge
    contains what it merged and numbers its emission past theirs). A session
    split by freeing whose later part, built of new rows, grows to contain
    the earlier part with a higher revision is taken for a merge here;
    :func:`readings` offers the other reading where the watermarks allow it.
    """
    if mode == "retracting":
        return {iv for iv, ems in intervals.items()
                if sum(-1 if e["kind"] == "retraction" else 1 for e in ems) > 0}
    return {j for j in intervals if not _replacing(intervals, j)}


def readings(mode: str, intervals: Mapping[tuple[int, int], Sequence[Mapping]], grace_us: int) -> list[set]:
    """The sets of heads a correct stream may have: :func:`heads`, and in accumulating mode, when some interval
    is replaced only by intervals that may be a split by freeing, also every interval not *surely* replaced.

    An interval ``i`` containing ``j`` surely merged it if ``i`` ends where
    ``j`` ends (a session admitted after ``j`` was freed ends after ``j``), or
    if ``i`` has an emission at a step whose watermark (each emission's
    ``watermark``, µs; None: undefined) is below ``j.end + grace``: ``j`` was
    still live then, and a live session covered by another was merged into it.
    """
    strict = heads(mode, intervals)
    if mode == "retracting":
        return [strict]

    def sure(i: tuple[int, int], j: tuple[int, int]) -> bool:
        return i[1] == j[1] or any(e["kind"] != "retraction" and (
            e.get("watermark") is None or e["watermark"] < j[1] + grace_us) for e in intervals[i])

    loose = {j for j in intervals if not any(sure(i, j) for i in _replacing(intervals, j))}
    return [strict] if loose == strict else [strict, loose]


def _replacing(intervals: Mapping[tuple[int, int], Sequence[Mapping]], j: tuple[int, int]) -> list:
    """The emitted intervals that contain ``j`` with a later revision (the merges that may have replaced it)."""
    def rev(iv: tuple[int, int]) -> int:
        return max((effective_revision(e) for e in intervals[iv] if e["kind"] != "retraction"), default=-2)

    return [i for i in intervals if i != j and i[0] <= j[0] and j[1] <= i[1] and rev(i) > rev(j)]


def fold_session(mode: str, intervals: Mapping[tuple[int, int], Sequence[Mapping]], funcs: Mapping[str, str],
                 nulls: Iterable[str] = (), top_set: set | None = None) -> tuple[dict[str, object], list[str]]:
    """The stream value of one batch session from its emitted intervals' emissions, and the columns not compared.

    ``funcs`` must hold ``count`` (the rows: the weights of merged averages);
    ``nulls``: the ``avg`` columns with a null among the batch session's
    expected rows (several heads' averages cannot be weighted then);
    ``top_set``: the heads (default :func:`heads`; one of :func:`readings`).
    A window is explained when the fold by one of its readings is the
    expected value.
    """
    per = {iv: fold(mode, ems, funcs) for iv, ems in intervals.items()}
    top = [per[iv] for iv in sorted(heads(mode, intervals) if top_set is None else top_set)]
    out: dict[str, object] = {}
    skipped: list[str] = []
    nulls = set(nulls)
    for col, func in funcs.items():
        r = rule(mode, func)
        # Values of one column: all comparable with each other (numbers, or strings, or dates).
        every: list[Any] = [v[col] for v in per.values() if v[col] is not None]
        last: list[Any] = [v[col] for v in top if v[col] is not None]
        if r is None or not per:
            out[col] = None
        elif r in (ADD, SIGNED):
            out[col] = _total((1, v) for v in every)
        elif r in (MIN, MAX):
            out[col] = (min(every) if r == MIN else max(every)) if every else None
        elif func in ("count", "sum", "count_if"):
            out[col] = _total((1, v) for v in last)
        elif func in ("min", "max"):
            out[col] = (min(last) if func == "min" else max(last)) if last else None
        elif len(top) == 1:
            out[col] = top[0][col]
        elif col in nulls or func != "avg":  # heads' variances do not merge without their means
            out[col] = None
            skipped.append(col)
        else:
            out[col] = _weighted([(v[col], v["count"]) for v in top])
    return out, skipped


def _weighted(terms: Sequence[tuple[object, object]]) -> object:
    """``sum(avg * n) / sum(n)`` over the terms with an average (None when none has one)."""
    terms = [(a, n) for a, n in terms if a is not None and n]
    rows = sum(int(n) for _, n in terms)  # type: ignore[call-overload]
    if not rows:
        return None
    return _total((1, a * n) for a, n in terms) / rows  # type: ignore[operator]


def _total(terms: Iterable[tuple[int, object]]) -> object:
    total: object = None
    for sign, v in terms:
        if v is None:
            continue
        total = sign * v if total is None else total + sign * v  # type: ignore[operator]
    return total


# Sketches (ADR 0039): the stream's sketch is a merge of its cuts' sketches, the batch's one sketch of all the rows,
# so they agree exactly only while the sketches are exact; beyond, within their documented error (partial_values).
HLL_EXACT = 3 * 2 ** (HLL_LG_K - 3) // 4  # 384 values: an HLL sketch of lg K 12 keeps its hashes (exact) up to this
HLL_RSE = 1.04 / math.sqrt(2**HLL_LG_K)  # HLL_4's relative standard error, about 1.6 %
KLL_RANK_ERROR = 0.0166  # a KLL sketch of k 200: normalised rank error (99 % confidence), about 1.65 %
QUANTILE_TOLERANCE = 2 * KLL_RANK_ERROR  # the stream's sketch's error plus the batch sketch's reading it
SKETCHES = ("approx_count_distinct", "approx_percentile")


def within_sketch_error(func: str, truth: object, stream: object, n: int = 0,
                        bounds: tuple[object, object] = (None, None)) -> bool:
    """Whether a sketch's ``stream`` value is the ``truth`` (the batch's sketch of the rows) within its error.

    ``approx_count_distinct``: equal while both are at most :data:`HLL_EXACT` (exact), else within 3 standard
    errors of each other's size each (``6 * HLL_RSE * max``). ``approx_percentile`` over ``n`` values: equal up
    to ``KLL_K`` values (exact), else between the batch sketch's quantiles at ``p -+`` :data:`QUANTILE_TOLERANCE`
    (``bounds``): ranks, not values, carry the error, and a run of equal values is one value.

    >>> within_sketch_error("approx_count_distinct", 1000, 1040), within_sketch_error("approx_count_distinct", 10, 11)
    (True, False)
    """
    if truth is None or stream is None:
        return truth is None and stream is None
    if truth == stream:
        return True
    if func == "approx_count_distinct":
        big = max(int(truth), int(stream))  # type: ignore[call-overload]
        return big > HLL_EXACT and abs(int(truth) - int(stream)) <= 6 * HLL_RSE * big  # type: ignore[call-overload]
    lo, hi = bounds
    return n > KLL_K and lo is not None and hi is not None and lo <= stream <= hi  # type: ignore[operator]


def same(a: object, b: object) -> bool:
    """Equal, with doubles to a relative :data:`REL_TOLERANCE` (ints and Decimals exactly); None only equals None."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        x, y = float(a), float(b)  # type: ignore[arg-type]
        if math.isnan(x) or math.isnan(y):
            return math.isnan(x) and math.isnan(y)
        return abs(x - y) <= REL_TOLERANCE * max(1.0, abs(x), abs(y))
    return a == b


def difference(truth: object, stream: object) -> object:
    """``truth - stream`` (a missing side counts as 0; None when neither is a number)."""
    if truth is None and stream is None:
        return None
    zero: object = Decimal(0) if isinstance(truth, Decimal) or isinstance(stream, Decimal) else 0
    t = zero if truth is None else truth
    s = zero if stream is None else stream
    if isinstance(t, int | float | Decimal) and isinstance(s, int | float | Decimal):
        return t - s  # type: ignore[operator]
    return None


def unexplained(expected: Mapping[str, object], stream: Mapping[str, object], columns: Sequence[str]) -> list[str]:
    """The output columns whose stream value is not the expected one (empty: the window is explained)."""
    return [c for c in columns if not same(expected.get(c), stream.get(c))]
