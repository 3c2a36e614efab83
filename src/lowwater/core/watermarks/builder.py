"""Build a :class:`WatermarkStrategy` from a configuration table, naming the key on every error.

The table is what a source's ``watermark = { ... }`` inline table (or today's
``[watermark]`` section) holds::

    >>> s = strategy_from_table({"strategy": "adaptive", "target_quantile": 0.999, "over": "10m",
    ...                          "min_lateness": "1s", "max_lateness": "2m", "idle_timeout": "1m"})
    >>> s.kind, s.generator.over_us, s.idle_timeout_us
    ('adaptive', 600000000, 60000000)
    >>> try:
    ...     strategy_from_table({"strategy": "punctuated", "max_out_of_orderness": "5s"})
    ... except StrategyError as e:
    ...     print(str(e).split(" (")[0])
    watermark.max_out_of_orderness: not a key of strategy = "punctuated"

A new generator is one module (its :class:`GeneratorSpec` and generator)
plus one :func:`register_strategy` line: its name, its own keys and a function
from the table (:class:`StrategyTable`) to its spec. Checks that need the
source (an arrival-time column for idleness, adaptive and clipping; a
partition column for idleness and declared partitions) belong to the source's
parser, which knows the source (a spec says what it needs:
``GeneratorSpec.arrival_needed_for``, ``marker_column``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lowwater.core.watermarks.adaptive import Adaptive
from lowwater.core.watermarks.protocol import GeneratorSpec
from lowwater.core.watermarks.punctuated import Punctuated
from lowwater.core.watermarks.strategy import WatermarkStrategy
from lowwater.time import to_duration_us


class StrategyError(ValueError):
    """A watermark table problem, as one line that starts with ``<where>.<key>:``."""


class StrategyTable:
    """Typed reads of one watermark table, each error prefixed with the key's full name."""

    def __init__(self, table: Mapping[str, Any], where: str) -> None:
        self.table, self.where = table, where

    def fail(self, key: str, problem: str) -> StrategyError:
        return StrategyError(f"{self.where}.{key}: {problem}")

    def duration(self, key: str, default: str | None = None) -> int | None:
        value = self.table.get(key, default)
        if value is None:
            return None
        try:
            return to_duration_us(value)
        except ValueError as e:
            raise self.fail(key, str(e)) from None

    def string(self, key: str) -> str:
        value = self.table.get(key)
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"expected a non-empty string, got {value!r}")
        return value

    def number(self, key: str, default: float) -> float:
        value = self.table.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"expected a number, got {value!r}")
        return float(value)

    def count(self, key: str) -> int | None:
        value = self.table.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise self.fail(key, f"expected a positive integer, got {value!r}")
        return value


def _bounded(t: StrategyTable) -> dict[str, Any]:
    fields: dict[str, Any] = {"max_out_of_orderness_us": t.duration("max_out_of_orderness", "0s")}
    if "out_of_orderness_by_partition" in t.table:
        by = t.table["out_of_orderness_by_partition"]
        if not isinstance(by, Mapping):
            raise t.fail("out_of_orderness_by_partition", "expected a table partition = duration")
        fields["per_partition_us"] = tuple(
            sorted((str(k), t.duration(f"out_of_orderness_by_partition.{k}", v)) for k, v in by.items())
        )
    return fields


def _punctuated(t: StrategyTable) -> Punctuated:
    return Punctuated(t.string("marker"))


def _adaptive(t: StrategyTable) -> Adaptive:
    values: dict[str, Any] = {
        "target_quantile": t.number("target_quantile", 0.999),
        "rows": t.count("rows"),
        "over_us": t.duration("over"),
        "min_lateness_us": t.duration("min_lateness", "0s"),
        "max_lateness_us": t.duration("max_lateness"),
    }
    try:
        return Adaptive(**values)
    except ValueError as e:  # Adaptive's messages start with the key they are about
        key, _, problem = str(e).partition(": ")
        raise t.fail(key, problem) from None


@dataclass(frozen=True)
class _Registration:
    keys: frozenset[str]
    fields: Callable[[StrategyTable], dict[str, Any]]


_COMMON = frozenset({"strategy", "idle_timeout", "partitions", "max_future_skew"})

# strategy name -> its keys and the strategy fields its table gives; bounded is the default (generator None).
STRATEGIES: dict[str, _Registration] = {
    "bounded": _Registration(frozenset({"max_out_of_orderness", "out_of_orderness_by_partition"}), _bounded),
}


def register_strategy(name: str, keys: Iterable[str], build: Callable[[StrategyTable], GeneratorSpec]) -> None:
    """Make ``strategy = "<name>"`` a watermark table's generator, with its own ``keys`` read by ``build``.

    ``build`` reads the table through :class:`StrategyTable` (each error names
    its key) and returns the generator's spec; the common keys (idle_timeout,
    partitions, max_future_skew) work for every strategy.
    """
    if name in STRATEGIES:
        msg = f"watermark strategy {name!r} is registered already"
        raise ValueError(msg)
    clash = _COMMON & set(keys)
    if clash:
        msg = f"watermark strategy {name!r}: {', '.join(sorted(clash))} are common keys, not its own"
        raise ValueError(msg)
    STRATEGIES[name] = _Registration(frozenset(keys), lambda t: {"generator": build(t)})


register_strategy("punctuated", {"marker"}, _punctuated)
register_strategy("adaptive", {"target_quantile", "rows", "over", "min_lateness", "max_lateness"}, _adaptive)


def strategy_from_table(table: Mapping[str, Any], where: str = "watermark") -> WatermarkStrategy:
    """One source's :class:`WatermarkStrategy` from its watermark table; ``StrategyError`` names the key."""
    t = StrategyTable(table, where)
    name = table.get("strategy", "bounded")
    if name not in STRATEGIES:
        raise t.fail("strategy", f"{name!r} is not one of {', '.join(STRATEGIES)}")
    reg = STRATEGIES[name]
    allowed = _COMMON | reg.keys
    for key in table:
        if key not in allowed:
            raise t.fail(key, f'not a key of strategy = "{name}" (its keys: {", ".join(sorted(allowed))})')
    strategy = WatermarkStrategy(**reg.fields(t))
    if "idle_timeout" in table:
        timeout = t.duration("idle_timeout")
        if not timeout:
            raise t.fail("idle_timeout", "must be positive")
        strategy = strategy.with_idleness(timeout)
    if "partitions" in table:
        parts = table["partitions"]
        if not isinstance(parts, list) or not parts:
            raise t.fail("partitions", "expected a non-empty list")
        strategy = strategy.with_partitions([str(p) for p in parts])
    if "max_future_skew" in table:
        strategy = strategy.with_max_future_skew(t.duration("max_future_skew"))
    return strategy
