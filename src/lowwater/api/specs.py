"""The API's small value objects: watermark strategies, window shapes, sinks.

Each holds the TOML table the configuration file would hold for it, so the
pipeline the API builds is parsed by the same code as the file's
(``config/``): one model, two front doors. Each is checked where it is made:
a wrong argument is one error naming it. The examples assume ``import lowwater as lw``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lowwater.api.args import choice, count, duration, name
from lowwater.config.watermark import parse_strategy


def _table(pairs: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple((k, v) for k, v in pairs.items() if v is not None)


@dataclass(frozen=True)
class Watermark:
    """A watermark strategy: ``lw.bounded``, ``lw.punctuated`` or ``lw.adaptive``, then ``.with_*`` options."""

    table: tuple[tuple[str, Any], ...]
    """The ``[watermark]`` keys the file would hold."""

    def __post_init__(self) -> None:
        parse_strategy(dict(self.table), "watermark")  # the core's own checks (core/watermarks/builder.py)

    def _with(self, **keys: Any) -> Watermark:  # noqa: ANN401
        return Watermark(tuple({**dict(self.table), **keys}.items()))

    def with_idleness(self, timeout: Any) -> Watermark:  # noqa: ANN401 - a duration
        """A partition silent for ``timeout`` (on the arrival clock) leaves the min until it produces again.

        >>> lw.bounded("5s").with_idleness("1 minute").table
        (('strategy', 'bounded'), ('max_out_of_orderness', '5s'), ('idle_timeout', '1m'))
        """
        return self._with(idle_timeout=duration("with_idleness(timeout=...)", timeout, positive=True))

    def with_partitions(self, *partitions: Any) -> Watermark:  # noqa: ANN401
        """Declared partitions: ``W`` is undefined until every one of them has reported.

        >>> dict(lw.bounded("2s").with_partitions(0, 1, 2, 3).table)["partitions"]
        [0, 1, 2, 3]
        """
        if not partitions:
            msg = "with_partitions(*partitions): name at least one partition"
            raise ValueError(msg)
        return self._with(partitions=[p if isinstance(p, int) else str(p) for p in partitions])


def bounded(max_out_of_orderness: Any = "0s", by_partition: dict[Any, Any] | None = None) -> Watermark:  # noqa: ANN401
    """``W_p = max(event_time) - max_out_of_orderness`` (Flink's ``forBoundedOutOfOrderness``).

    ``by_partition``: another bound for some partitions.

    >>> dict(lw.bounded("5s", by_partition={3: "30s"}).table)
    {'strategy': 'bounded', 'max_out_of_orderness': '5s', 'out_of_orderness_by_partition': {'3': '30s'}}
    >>> lw.bounded("-5s")
    Traceback (most recent call last):
    ValueError: bounded(max_out_of_orderness=...): not a duration: '-5s' (write e.g. "10s", "250ms", "5m", "1h")
    """
    table: dict[str, Any] = {
        "strategy": "bounded",
        "max_out_of_orderness": duration("bounded(max_out_of_orderness=...)", max_out_of_orderness),
    }
    if by_partition:
        table["out_of_orderness_by_partition"] = {
            str(p): duration(f"bounded(by_partition={{{p!r}: ...}})", d) for p, d in by_partition.items()}
    return Watermark(_table(table))


def punctuated(marker: str) -> Watermark:
    """``W_p`` moves on marker rows only: a row whose boolean ``marker`` column is true proves its event time.

    >>> dict(lw.punctuated(marker="is_marker").table)
    {'strategy': 'punctuated', 'marker': 'is_marker'}
    """
    return Watermark(_table({"strategy": "punctuated", "marker": name("punctuated(marker=...)", marker)}))


def adaptive(
    target_quantile: float = 0.999, rows: int | None = None, over: Any = None,  # noqa: ANN401
    min_lateness: Any = None, max_lateness: Any = None,  # noqa: ANN401
) -> Watermark:
    """``W_p = max(event_time) - L``, ``L`` the quantile of recent ``arrival - event`` delays (needs ``arrival``).

    ``rows`` or ``over``: how many recent rows, or how much recent arrival time,
    the quantile is taken over; ``min_lateness``/``max_lateness``: bounds on ``L``.

    >>> dict(lw.adaptive(0.999, over="10 minutes", max_lateness="2m").table)
    {'strategy': 'adaptive', 'target_quantile': 0.999, 'over': '10m', 'max_lateness': '2m'}
    """
    if not isinstance(target_quantile, int | float) or isinstance(target_quantile, bool):
        msg = f"adaptive(target_quantile=...): expected a number in (0, 1], got {target_quantile!r}"
        raise TypeError(msg)
    return Watermark(_table({
        "strategy": "adaptive",
        "target_quantile": float(target_quantile),
        "rows": None if rows is None else count("adaptive(rows=...)", rows),
        "over": None if over is None else duration("adaptive(over=...)", over, positive=True),
        "min_lateness": None if min_lateness is None else duration("adaptive(min_lateness=...)", min_lateness),
        "max_lateness": None if max_lateness is None else duration("adaptive(max_lateness=...)", max_lateness),
    }))


@dataclass(frozen=True)
class WindowShape:
    """A window assigner: ``lw.tumbling``, ``lw.hopping`` or ``lw.session``."""

    table: tuple[tuple[str, Any], ...]
    """The ``[window]`` keys the file would hold."""


def tumbling(size: Any, offset: Any = None) -> WindowShape:  # noqa: ANN401
    """Fixed, non-overlapping windows ``[k*size + offset, (k+1)*size + offset)``.

    >>> lw.tumbling("1 minute")
    WindowShape(table=(('type', 'tumbling'), ('size', '1m')))
    """
    return WindowShape(_table({
        "type": "tumbling", "size": duration("tumbling(size=...)", size, positive=True),
        "offset": None if offset is None else duration("tumbling(offset=...)", offset),
    }))


def hopping(size: Any, slide: Any, offset: Any = None) -> WindowShape:  # noqa: ANN401
    """Overlapping windows of ``size`` starting every ``slide`` (``slide`` divides ``size``).

    >>> lw.hopping("10 minutes", "5 minutes").table
    (('type', 'hopping'), ('size', '10m'), ('slide', '5m'))
    >>> lw.hopping("10m", "3m")
    Traceback (most recent call last):
    ValueError: hopping(slide=...): '3m' must divide size '10m'
    """
    size_t = duration("hopping(size=...)", size, positive=True)
    slide_t = duration("hopping(slide=...)", slide, positive=True)
    from lowwater.time import to_duration_us

    if to_duration_us(size_t) % to_duration_us(slide_t):
        msg = f"hopping(slide=...): {slide!r} must divide size {size!r}"
        raise ValueError(msg)
    return WindowShape(_table({
        "type": "hopping", "size": size_t, "slide": slide_t,
        "offset": None if offset is None else duration("hopping(offset=...)", offset),
    }))


def session(gap: Any) -> WindowShape:  # noqa: ANN401
    """A key's rows closer than ``gap`` form one session ``[first, last + gap)``.

    >>> lw.session(gap="30s")
    WindowShape(table=(('type', 'session'), ('gap', '30s')))
    """
    return WindowShape(_table({"type": "session", "gap": duration("session(gap=...)", gap, positive=True)}))


ACCUMULATIONS = ("accumulating", "discarding", "retracting")
LATE_POLICIES = ("side_output", "drop")


@dataclass(frozen=True)
class Sink:
    """Where results go: ``lw.parquet``, ``lw.delta``, ``lw.postgres`` or ``lw.foreach_batch``."""

    kind: str
    """``parquet``, ``delta``, ``postgres`` or ``foreach_batch``."""
    path: str | None = None
    """The output path (``[output] path``), if this sink names one."""
    postgres: tuple[tuple[str, Any], ...] = field(default=(), repr=False)  # the URL may hold a password
    """The ``[output.postgres]`` keys."""
    callback: Callable[..., None] | None = field(default=None, compare=False)
    """``lw.foreach_batch``'s function."""


def parquet(path: str | os.PathLike[str]) -> Sink:
    """Results, late rows, dead letters and metrics as Parquet under ``path`` (one directory per step).

    >>> lw.parquet("s3a://bucket/payments")
    Sink(kind='parquet', path='s3a://bucket/payments', callback=None)
    """
    return Sink("parquet", _path("parquet(path=...)", path))


def delta(path: str | os.PathLike[str]) -> Sink:
    """Also as Delta Lake tables under ``<path>/delta/<kind>`` (written beside the Parquet outputs)."""
    return Sink("delta", _path("delta(path=...)", path))


def postgres(url: str, path: str | os.PathLike[str] | None = None, schema: str = "public", **tables: str) -> Sink:
    """Also delivered to PostgreSQL, exactly once per step; ``tables``: ``results_table=...`` and the others.

    >>> lw.postgres("postgresql://lowwater:secret@db:5432/metrics", results_table="payments").kind
    'postgres'
    >>> lw.postgres("mysql://db/metrics")
    Traceback (most recent call last):
    ValueError: postgres(url=...): expected postgresql://user:password@host:port/database
    """
    if not isinstance(url, str) or not url.startswith(("postgresql://", "postgres://")):
        msg = "postgres(url=...): expected postgresql://user:password@host:port/database"
        raise ValueError(msg)
    from lowwater.config.output import PG_TABLE_KEYS

    for key in tables:
        choice(f"postgres({key}=...)", key, PG_TABLE_KEYS)
    pg = {"url": url, "schema": schema, **tables}
    return Sink("postgres", None if path is None else _path("postgres(path=...)", path), _table(pg))


def foreach_batch(fn: Callable[..., None]) -> Sink:
    """Call ``fn(batch)`` once per committed step: ``batch.step``, ``.results``, ``.revisions``, ``.late``, ...

    It runs before the step commits; a step replayed after a crash calls it
    again with the same ``batch.step``, so a callback that replaces what it
    wrote for that step id is exactly-once (``api/foreach.py``).

    >>> def save(batch):  # replaces what an earlier try of this step wrote
    ...     batch.results.write.mode("overwrite").parquet(f"/data/payments/step={batch.step}")
    >>> lw.foreach_batch(save).kind
    'foreach_batch'
    """
    if not callable(fn):
        msg = f"foreach_batch(fn): expected a function of one argument, got {fn!r}"
        raise TypeError(msg)
    return Sink("foreach_batch", callback=fn)


def _path(arg: str, value: Any) -> str:  # noqa: ANN401
    if not isinstance(value, str | os.PathLike) or not str(value):
        msg = f"{arg}: expected a path, got {value!r}"
        raise TypeError(msg)
    text = str(value)
    return text if "://" in text else os.path.abspath(text)
