"""Time inside lowwater: integer microseconds, durations at the edges.

Every timestamp and duration inside the engine is an ``int`` (or an ``int64``
numpy array) counting microseconds since the Unix epoch, so float precision
never leaks into window boundaries. Durations are written by users as strings
such as ``"10s"``, ``"250ms"``, ``"5m"`` or as :class:`datetime.timedelta`
and converted once, at the boundary, by :func:`to_duration_us`.

``NEG_INF`` / ``POS_INF`` stand for an undefined watermark and the drained
watermark. They sit at +-2**62, far from any real timestamp, so that
``max_event - bound`` never overflows int64. They never reach an output as
such: every output (Parquet, PostgreSQL, ``summary.json``) writes the drained
watermark as ``MAX_TIMESTAMP_US`` (2262-04-11T23:47:16.854775Z: the last
microsecond pandas' ``datetime64[ns]`` holds, which Spark's ``toPandas``
converts every timestamp to; Spark's own 9999-12-31 would make it fail) and
the undefined one as null (:func:`output_us`).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

NEG_INF: int = -(2**62)
"""Minus infinity in µs: the watermark before any row (no window can close)."""
POS_INF: int = 2**62
"""Plus infinity in µs: the drained watermark (every window closes)."""
# The drained (+inf) watermark as written to every output: 2262-04-11T23:47:16.854775Z
# (pandas.Timestamp.max to the microsecond; every reader -- Spark, pandas, PostgreSQL -- holds it).
MAX_TIMESTAMP_US: int = 9_223_372_036_854_775

US_PER: dict[str, int] = {
    "us": 1,
    "ms": 1_000,
    "s": 1_000_000,
    "m": 60_000_000,
    "h": 3_600_000_000,
    "d": 86_400_000_000,
}

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m|h|d)\s*$")


def to_duration_us(value: str | int | float | timedelta) -> int:
    """Convert ``"10s"``, ``"250ms"``, ``"5m"``, a timedelta or seconds into µs.

    >>> to_duration_us("1.5s"), to_duration_us("250ms"), to_duration_us(timedelta(minutes=1))
    (1500000, 250000, 60000000)
    """
    if isinstance(value, timedelta):
        return int(round(value.total_seconds() * 1_000_000))
    if isinstance(value, bool):
        msg = f"not a duration: {value!r}"
        raise ValueError(msg)
    if isinstance(value, int | float):
        if value < 0:
            msg = f"a duration cannot be negative: {value!r}"
            raise ValueError(msg)
        return int(round(value * 1_000_000))
    m = _DURATION.match(str(value))
    if not m:
        msg = f"not a duration: {value!r} (write e.g. \"10s\", \"250ms\", \"5m\", \"1h\")"
        raise ValueError(msg)
    number, unit = m.groups()
    return int(round(float(number) * US_PER[unit]))


def format_duration_us(us: int) -> str:
    """Render µs as the shortest exact duration string (``1500000 -> "1500ms"``)."""
    for unit in ("d", "h", "m", "s", "ms"):
        if us % US_PER[unit] == 0 and us != 0:
            return f"{us // US_PER[unit]}{unit}"
    return f"{us}us"


_COMPOUND = (("d", US_PER["d"]), ("h", US_PER["h"]), ("m", US_PER["m"]), ("s", US_PER["s"]))


def format_duration(us: float | None) -> str:
    """A duration as users write them, for every duration lowwater prints: ``11h``, ``1h 30m``, ``250ms``.

    Under a minute: one unit, up to three decimals (``1.5s``, ``12.5ms``,
    ``40us``); from a minute on: whole seconds in days, hours, minutes and
    seconds, zero parts left out (``11h 13m``, ``1d 2h``, ``2m 5s``). ``None``
    (nothing measured) prints as ``-``. Fingerprints keep their own exact text
    (:func:`format_duration_us`).

    >>> format_duration(39_600_000_000), format_duration(5_400_000_000), format_duration(250_000)
    ('11h', '1h 30m', '250ms')
    >>> format_duration(40_380.4e6), format_duration(1.5e6), format_duration(0), format_duration(None)
    ('11h 13m', '1.5s', '0s', '-')
    """
    if us is None:
        return "-"
    if us < 0:
        return "-" + format_duration(-us)
    if us < 0.0005:
        return "0s"
    if us < US_PER["m"] - 500:
        unit = "us" if us < 999.5 else "ms" if us < US_PER["s"] - 500 else "s"
        return f"{round(us / US_PER[unit], 3):g}{unit}"
    rest = int(us / US_PER["s"] + 0.5) * US_PER["s"]
    parts = []
    for unit, size in _COMPOUND:
        n, rest = divmod(rest, size)
        if n:
            parts.append(f"{int(n)}{unit}")
    return " ".join(parts)


def output_us(us: int | None) -> int | None:
    """A watermark as an output writes it: null when undefined, ``MAX_TIMESTAMP_US`` when drained.

    >>> output_us(NEG_INF), output_us(POS_INF) == MAX_TIMESTAMP_US, output_us(5)
    (None, True, 5)
    """
    if us is None or us <= NEG_INF:
        return None
    return min(int(us), MAX_TIMESTAMP_US)


def to_datetime(us: int | None) -> datetime | None:
    """µs since the epoch to an aware UTC datetime; ``None`` when undefined, the max timestamp when drained."""
    out = output_us(us)
    if out is None:
        return None
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=out)


def format_ts(us: int | None) -> str | None:
    """ISO-8601 UTC text of a watermark (``...Z``); ``None`` when undefined, the max timestamp when drained.

    >>> format_ts(POS_INF), format_ts(1_500_000), format_ts(NEG_INF)
    ('2262-04-11T23:47:16.854775Z', '1970-01-01T00:00:01.500000Z', None)
    """
    dt = to_datetime(us)
    if dt is None:
        return None
    return dt.isoformat().replace("+00:00", "Z")


# Epoch times a pipeline plausibly processes: 1971-01-01 .. 2200-01-01 (µs); values
# before it are only called misread when another unit puts them in 2000 .. 2100.
PLAUSIBLE_US: tuple[int, int] = (31_536_000_000_000, 7_258_118_400_000_000)
RECENT_US: tuple[int, int] = (946_684_800_000_000, 4_102_444_800_000_000)
TIME_UNITS: tuple[str, ...] = ("s", "ms", "us")


def misread_time_unit(typical_us: float, unit: str) -> str | None:
    """Why a typical event time read in ``unit`` (giving ``typical_us``) looks misread, or None.

    Numbers in the wrong unit fail silently: epoch milliseconds read as seconds
    put every window in year ~55,000. A value between 1971 and 2200 is fine. A
    later one is misread: the message names the unit that fits, if any. An
    earlier one (times relative to a start, as in tests) is fine unless another
    unit puts it between 2000 and 2100 (epoch seconds read as milliseconds).

    >>> misread_time_unit(1.7e18, "s")  # epoch ms (1.7e12) read as seconds
    'read as time_unit = "s" they fall after the year 2200; as "ms" they are 2023-11-14: set source.time_unit = "ms"'
    >>> misread_time_unit(1.7e15, "s") is None, misread_time_unit(31e6, "s") is None
    (True, True)
    """
    lo, hi = PLAUSIBLE_US
    if lo <= typical_us < hi:
        return None
    late = typical_us >= hi
    fits = PLAUSIBLE_US if late else RECENT_US
    for other in TIME_UNITS:
        as_other = typical_us * US_PER[other] / US_PER[unit]
        if other != unit and fits[0] <= as_other < fits[1]:
            day = (format_ts(int(as_other)) or "")[:10]
            when = "after the year 2200" if late else "in 1970"
            return (f'read as time_unit = "{unit}" they fall {when}; as "{other}" they are {day}: '
                    f'set source.time_unit = "{other}"')
    if late:
        return f"they fall after the year 2200 read as any of {', '.join(TIME_UNITS)} since the epoch"
    return None
