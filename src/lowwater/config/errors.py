"""The one error type of the configuration, and the typed reads that name the key on failure.

A wrong configuration is reported as one :class:`ConfigError` line that starts
with the key it is about (``window.size: ...``); the CLI prints it and exits
with code 2, and nothing reaches Spark.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lowwater.time import to_duration_us


class ConfigError(ValueError):
    """A configuration problem, reported as one line naming the key."""


def duration(section: str, key: str, value: Any) -> int:
    """A duration (``"3s"``, ``250``) in µs; the error names ``section.key``."""
    try:
        return to_duration_us(value)
    except ValueError as e:
        msg = f"{section}.{key}: {e}"
        raise ConfigError(msg) from None


def text(section: str, key: str, value: Any) -> str:
    """A non-empty string; the error names ``section.key``."""
    if not isinstance(value, str) or not value:
        msg = f"{section}.{key}: expected a non-empty string, got {value!r}"
        raise ConfigError(msg)
    return value


def check_keys(where: str, table: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """Refuse a key of ``table`` not in ``allowed`` (a typo must not be silently ignored)."""
    allowed = set(allowed)
    for key in table:
        if key not in allowed:
            msg = f"unknown key {where}.{key} (expected one of {', '.join(sorted(allowed))})"
            raise ConfigError(msg)


def table(where: str, value: Any) -> dict[str, Any]:
    """A TOML table (``[where]``), else one line."""
    if not isinstance(value, dict):
        msg = f"[{where}] must be a table"
        raise ConfigError(msg)
    return value
