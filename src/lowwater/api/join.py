"""``.interval_join(other, on=..., between=(lower, upper))``: the TOML file's ``[join]`` built from two streams.

Two named streams, each with its own watermark (``lw.stream(df, ...,
name="clicks").watermark(...)``), become the ``[[source]]`` tables of a
:meth:`~lowwater.api.pipeline.Pipeline.union`; the join is then the
``[join]`` table the file would hold (``config/join.py``), parsed by the same
code, so the same join in Python and in TOML is one ``PipelineConfig`` and
runs the same operator (SEMANTICS.md §9). A pair matches when
``lower <= right.event_time - left.event_time <= upper``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from lowwater.api.args import choice, duration, names
from lowwater.config.join import JOIN_TYPES

if TYPE_CHECKING:
    from lowwater.api.pipeline import Pipeline


def signed(arg: str, value: Any) -> str:  # noqa: ANN401 - a duration, maybe negative
    """A join bound: a duration as :func:`~lowwater.api.args.duration` takes, which may be negative (``"-5s"``).

    >>> signed("between", "-5 seconds"), signed("between", timedelta(minutes=-30)), signed("between", 0)
    ('-5s', '-30m', '0s')
    """
    if isinstance(value, str) and value.strip().startswith("-"):
        return "-" + duration(arg, value.strip()[1:])
    if isinstance(value, timedelta) and value < timedelta(0):
        return "-" + duration(arg, -value)
    if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
        return "-" + duration(arg, -value)
    return duration(arg, value)


def join_table(
    left: Pipeline, right: Pipeline, on: str | Sequence[str], between: Any,  # noqa: ANN401 - a pair of durations
    how: str, columns: Mapping[str, Sequence[str]] | None,
) -> dict[str, Any]:
    """The ``[join]`` table of ``left`` joined with ``right`` (one named stream each); one error naming the argument."""
    sides = []
    for arg, p in (("interval_join(self)", left), ("interval_join(other)", right)):
        src = p.data.get("source")
        if not isinstance(src, dict) or "name" not in src:
            msg = f"{arg}: expected one named stream, lw.stream(df, ..., name=\"clicks\").watermark(...)"
            raise ValueError(msg)
        if set(p.data) - {"source", "watermark"}:
            msg = f"{arg}: give the sinks after the join, not to the streams in it"
            raise ValueError(msg)
        sides.append(src["name"])
    if not isinstance(between, tuple | list) or len(between) != 2:
        msg = f"interval_join(between=...): expected (lower, upper), e.g. (\"0s\", \"30m\"), got {between!r}"
        raise TypeError(msg)
    keys = names("interval_join(on=...)", on)
    if not keys:
        msg = "interval_join(on=...): name at least one key column, e.g. on=\"user_id\""
        raise ValueError(msg)
    table: dict[str, Any] = {
        "left": sides[0], "right": sides[1], "on": keys,
        "lower": signed("interval_join(between=(lower, ...))", between[0]),
        "upper": signed("interval_join(between=(..., upper))", between[1]),
        "type": choice("interval_join(how=...)", how, JOIN_TYPES),
    }
    if columns is not None:
        if not isinstance(columns, Mapping):
            msg = f"interval_join(columns=...): expected {{\"left\": [...], \"right\": [...]}}, got {columns!r}"
            raise TypeError(msg)
        for side in columns:
            choice("interval_join(columns=...)", side, ("left", "right"))
        table["columns"] = {side: names(f"interval_join(columns={{{side!r}: ...}})", cols)
                            for side, cols in columns.items()}
    return table
