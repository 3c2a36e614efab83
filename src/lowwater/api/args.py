"""The Python API's argument checks: each bad argument is one ``ValueError``/``TypeError`` that names it.

The API writes the same TOML-shaped tables the configuration file holds
(``config/``); these helpers turn a Python value into the text the file would
hold (``"1m"``), so a wrong one is refused where it is passed, before any
query starts, with the argument's name (``lw.tumbling(size=...)``).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from lowwater.time import format_duration_us, to_duration_us

# Spark's interval words (``window("ts", "1 minute")``) -> lowwater's units.
_SPARK_UNITS = {
    "microsecond": "us", "microseconds": "us", "millisecond": "ms", "milliseconds": "ms",
    "second": "s", "seconds": "s", "sec": "s", "secs": "s", "minute": "m", "minutes": "m", "min": "m", "mins": "m",
    "hour": "h", "hours": "h", "day": "d", "days": "d",
}
_SPARK = re.compile(r"^\s*(\d+(?:\.\d+)?)\s+([A-Za-z]+)\s*$")


def duration(arg: str, value: Any, positive: bool = False) -> str:  # noqa: ANN401 - any duration form
    """A duration (``"5s"``, ``"1 minute"``, seconds, a ``timedelta``) as the file writes it (``"5s"``).

    >>> duration("tumbling(size=...)", "1 minute"), duration("x", timedelta(seconds=90)), duration("x", 0.5)
    ('1m', '90s', '500ms')
    >>> duration("tumbling(size=...)", "a while")
    Traceback (most recent call last):
    ValueError: tumbling(size=...): ...
    """
    if isinstance(value, str) and (m := _SPARK.match(value)) and m.group(2).lower() in _SPARK_UNITS:
        value = f"{m.group(1)}{_SPARK_UNITS[m.group(2).lower()]}"
    if not isinstance(value, str | int | float | timedelta) or isinstance(value, bool):
        msg = f"{arg}: expected a duration such as \"5s\", \"1 minute\" or a timedelta, got {value!r}"
        raise TypeError(msg)
    try:
        us = to_duration_us(value)
    except ValueError as e:
        msg = f"{arg}: {e}"
        raise ValueError(msg) from None
    if us < 0 or (positive and us == 0):
        msg = f"{arg}: must be {'positive' if positive else 'zero or more'}, got {value!r}"
        raise ValueError(msg)
    return format_duration_us(us) if us else "0s"


def name(arg: str, value: Any) -> str:  # noqa: ANN401
    """A column name: a non-empty string."""
    if not isinstance(value, str) or not value:
        msg = f"{arg}: expected a column name (a non-empty string), got {value!r}"
        raise TypeError(msg)
    return value


def names(arg: str, value: Any) -> list[str]:  # noqa: ANN401
    """One column name or a list of them."""
    if value is None:
        return []
    if isinstance(value, str):
        return [name(arg, value)]
    if not isinstance(value, list | tuple):
        msg = f"{arg}: expected a column name or a list of them, got {value!r}"
        raise TypeError(msg)
    return [name(arg, v) for v in value]


def choice(arg: str, value: Any, allowed: tuple[str, ...]) -> str:  # noqa: ANN401
    """One of ``allowed``."""
    if value not in allowed:
        msg = f"{arg}: {value!r} is not one of {', '.join(repr(a) for a in allowed)}"
        raise ValueError(msg)
    return str(value)


def count(arg: str, value: Any) -> int:  # noqa: ANN401
    """A positive integer."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        msg = f"{arg}: expected a positive integer, got {value!r}"
        raise ValueError(msg)
    return value


def source_name(value: Any) -> str:  # noqa: ANN401
    """A source's name (``lw.stream(name=...)``): letters, digits, ``_`` and ``-``."""
    if not isinstance(value, str) or not re.match(r"^[A-Za-z0-9_-]+$", value):
        msg = f"stream(name=...): {value!r} is not a plain name (letters, digits, _ and -)"
        raise ValueError(msg)
    return value


def streaming_columns(df: Any) -> list[str]:  # noqa: ANN401
    """The columns of a streaming DataFrame; one ``TypeError`` for anything else."""
    if type(df).__name__ != "DataFrame" or not hasattr(df, "isStreaming"):
        msg = f"stream(df): expected a streaming DataFrame (spark.readStream...load()), got {type(df).__name__}"
        raise TypeError(msg)
    if not df.isStreaming:
        msg = "stream(df): a batch DataFrame; lowwater runs a streaming one (spark.readStream...load())"
        raise TypeError(msg)
    return list(df.columns)
