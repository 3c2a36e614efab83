"""``lowwater whatif --compare``: watermark strategies side by side on the same history.

Each ``--compare`` value is a watermark table, written either as a TOML inline
table (the exact keys of a source's ``watermark = { ... }``)::

    --compare '{strategy = "adaptive", target_quantile = 0.999, over = "10m", max_lateness = "2m"}'

or in a short form, ``NAME [VALUE] [KEY=VALUE ...]``::

    --compare "bounded 30s"                        # max_out_of_orderness = "30s"
    --compare "punctuated is_marker"               # marker = "is_marker"
    --compare "adaptive q=0.999 over=10m max=2m"   # q, min, max, idle: short keys

or the word ``config``: every source's configured strategy, as is (with
several ``[[source]]`` tables no grid point reproduces them when their bounds
differ, since a grid ``L`` sets every source's bound)::

    --compare config

The value as written labels its row. A compared strategy replaces every
source's generator; each source keeps its own ``idle_timeout`` and declared
partitions unless the table sets them, and its clipping (``max_future_skew``
is the source's, not a strategy's). Every compared strategy replays exactly,
one tracker each.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from typing import Any

from lowwater.core.watermarks import STRATEGIES, StrategyError, WatermarkStrategy, strategy_from_table

SHORT_KEYS = {"q": "target_quantile", "min": "min_lateness", "max": "max_lateness", "idle": "idle_timeout"}
POSITIONAL = {"bounded": "max_out_of_orderness", "punctuated": "marker"}
CONFIGURED = "config"
"""The ``--compare`` value that replays each source's configured strategy."""


class CompareError(ValueError):
    """A ``--compare`` value that is not a watermark table: one line."""


def _scalar(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def parse_table(value: str) -> dict[str, Any]:
    """The watermark table a ``--compare`` value spells (inline TOML table or the short form)."""
    text = value.strip()
    if text.startswith("{"):
        try:
            table = tomllib.loads(f"compare = {text}")["compare"]
        except tomllib.TOMLDecodeError as e:
            raise CompareError(f"not a TOML inline table ({e})") from None
        if not isinstance(table, dict):
            raise CompareError("expected an inline table {strategy = ...}")
        return table
    words = text.split()
    if not words:
        raise CompareError("empty; expected e.g. 'bounded 30s' or '{strategy = \"bounded\", ...}'")
    name, rest = words[0], words[1:]
    if name not in STRATEGIES:
        raise CompareError(f"{name!r} is not a strategy (one of {', '.join(STRATEGIES)}), nor {CONFIGURED!r}")
    table: dict[str, Any] = {"strategy": name}
    for i, word in enumerate(rest):
        key, eq, raw = word.partition("=")
        if not eq:
            if i or name not in POSITIONAL:
                raise CompareError(f"{word!r}: expected KEY=VALUE")
            table[POSITIONAL[name]] = word
            continue
        table[SHORT_KEYS.get(key, key)] = _scalar(raw) if key in ("q", "target_quantile", "rows") else raw
    return table


def compared_strategies(
    values: list[str], sources: Mapping[str, WatermarkStrategy], has_arrival: bool
) -> dict[str, dict[str, WatermarkStrategy]]:
    """Label -> strategy per source for each ``--compare`` value; ``CompareError`` names the bad one."""
    out: dict[str, dict[str, WatermarkStrategy]] = {}
    for value in values:
        label = " ".join(value.split())
        if label == CONFIGURED:
            if label in out:
                raise CompareError(f"--compare {value!r}: given twice")
            out[label] = dict(sources)
            continue
        try:
            table = parse_table(value)
            if "max_future_skew" in table:
                raise CompareError("max_future_skew is the source's clipping, not a strategy's: set it in --config")
            strategy = strategy_from_table(table, where="compare")
            strategy.check_inputs(has_arrival, True)
        except (CompareError, StrategyError, ValueError) as e:
            raise CompareError(f"--compare {value!r}: {e}") from None
        if label in out:
            raise CompareError(f"--compare {value!r}: given twice")
        out[label] = {name: _inherit(strategy, table, base) for name, base in sources.items()}
    return out


def _inherit(strategy: WatermarkStrategy, table: Mapping[str, Any], base: WatermarkStrategy) -> WatermarkStrategy:
    """The source's idleness, declared partitions (unless the table sets them) and clipping."""
    if "idle_timeout" not in table:
        strategy = strategy.with_idleness(base.idle_timeout_us)
    if "partitions" not in table:
        strategy = strategy.with_partitions(base.declared_partitions)
    return strategy.with_max_future_skew(base.max_future_skew_us)

