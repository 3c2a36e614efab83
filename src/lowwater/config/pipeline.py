"""The whole pipeline: one parse function per section, assembled into :class:`PipelineConfig`."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lowwater.config.errors import ConfigError, check_keys, table
from lowwater.config.join import JOIN_KEYS, JOIN_WINDOW, JoinConfig, check_join_columns, parse_join
from lowwater.config.join_window import JOIN_WINDOW_AFTER, parse_join_window
from lowwater.config.observe import ALERT_KEYS, OBSERVE_KEYS, AlertsConfig, ObserveConfig, parse_alerts, parse_observe
from lowwater.config.output import OUTPUT_KEYS, ROW_OUTPUT_COLUMNS, SOURCE_COLUMN, OutputConfig, parse_output
from lowwater.config.overrides import apply_overrides
from lowwater.config.runtime import (
    LATE_KEYS,
    SPARK_KEYS,
    TRIGGER_KEYS,
    SparkConfig,
    parse_late,
    parse_spark,
    parse_trigger,
)
from lowwater.config.source import SOURCE_KEYS, SourceConfig, parse_sources
from lowwater.config.window import WINDOW_KEYS, WindowConfig, parse_window
from lowwater.core.aggregates import ORDERED, type_class, type_problem
from lowwater.core.lateness import LatePolicy
from lowwater.core.triggers import EarlyTrigger
from lowwater.core.watermarks import WatermarkStrategy

# The sections and their keys; ``[watermark]``'s keys depend on its strategy (core/watermarks/builder.py).
SECTIONS: dict[str, frozenset[str] | None] = {
    "source": SOURCE_KEYS,
    "watermark": None,
    "window": WINDOW_KEYS,
    "trigger": TRIGGER_KEYS,
    "late": LATE_KEYS,
    "output": OUTPUT_KEYS,
    "spark": SPARK_KEYS,
    "join": JOIN_KEYS,
    "observe": OBSERVE_KEYS,
    "alerts": ALERT_KEYS,
}


@dataclass(frozen=True)
class PipelineConfig:
    """A validated pipeline: its sources (each with its watermark strategy), the window, the outputs.

    Most of the code base reads one source through :attr:`source` and
    :attr:`watermark`; with several sources those raise a :class:`ConfigError`,
    so a command that handles one source only says so in one line.
    """

    sources: tuple[SourceConfig, ...]
    window: WindowConfig
    late_policy: LatePolicy
    output: OutputConfig
    spark: SparkConfig
    base_dir: str = "."
    early: EarlyTrigger | None = None  # [trigger] early: provisional firings of open windows
    # [trigger] interval: continuous runs start a micro-batch every interval (Spark's
    # processing-time trigger) instead of as soon as the previous one ends.
    trigger_interval_us: int | None = None
    # Written as [[source]] tables: outputs then carry a `source` column, keys are source.<name>.<key>.
    named_sources: bool = False
    # [join]: an interval join of two sources (config/join.py); ``window`` is then JOIN_WINDOW.
    join: JoinConfig | None = None
    observe: ObserveConfig = ObserveConfig()  # [observe]: exporters of the metrics model (off by default)
    alerts: AlertsConfig | None = None  # [alerts]: rules evaluated per step (off without the section)

    @property
    def result_window(self) -> WindowConfig:
        """The window whose results reach results/: the window after a join, else ``window``."""
        return self.join.window if self.join is not None and self.join.window is not None else self.window

    @property
    def multi_source(self) -> bool:
        return len(self.sources) > 1

    @property
    def source(self) -> SourceConfig:
        """The only source."""
        if len(self.sources) != 1:
            names = ", ".join(s.name for s in self.sources)
            msg = f"the configuration has {len(self.sources)} sources ({names}); this command reads one source only"
            raise ConfigError(msg)
        return self.sources[0]

    @property
    def watermark(self) -> WatermarkStrategy:
        """The only source's watermark strategy."""
        return self.source.watermark

    @property
    def strategies(self) -> dict[str, WatermarkStrategy]:
        """Each source's strategy by name, in declaration order (what the tracker takes)."""
        return {s.name: s.watermark for s in self.sources}

    @property
    def required_columns(self) -> list[str]:
        """Input columns the pipeline reads from its only source."""
        return self.columns_for(self.source)

    def columns_for(self, source: SourceConfig) -> list[str]:
        """Input columns read from ``source``: its own, then the window's key and value columns (or the join's)."""
        joined = []
        if self.join is not None and self.join.side_of(source.name) is not None:
            joined = list(self.join.columns_of(self.join.side_of(source.name) or "left"))
        return list(dict.fromkeys(
            source.required_columns + list(self.window.key) + self.window.value_columns + joined
        ))


Columns = Sequence[str] | Mapping[str, str | None]  # names, or names -> Spark type name (None: not known)


def check_columns(cfg: PipelineConfig, schemas: Mapping[str, Columns]) -> None:
    """Every column the pipeline reads exists in its source's schema (``schemas``: source name → columns).

    The window's key and aggregation columns must exist in every source; then
    no input column may have the name of one late/ and dead_letter/ add; where
    the columns' types are given, each aggregation must take its column's
    type (``core/aggregates.type_problem``). Sources missing from ``schemas``
    are not checked (a caller may check as each schema becomes known). One
    :class:`ConfigError` line names the key. The same check runs on the
    schema read before Spark starts (``io/headers.py``) and on Spark's.
    """
    for src in cfg.sources:
        if src.name not in schemas:
            continue
        cols = schemas[src.name]
        names = set(cols)
        if cfg.join is not None:
            check_join_columns(cfg.join, src.name, names)
        for col in cfg.columns_for(src):
            if col in names:
                continue
            if col in cfg.window.value_columns:
                role = "window.aggregations"
            elif col in cfg.window.key:
                role = "window.key"
            else:
                role = src.role_of(col) or "config"
            known = ", ".join(sorted(names))
            if src.named:
                msg = f"{role}: column {col!r} is missing from source {src.name!r} (its columns: {known})"
            else:
                msg = f"{role}: column {col!r} not found in the input (columns: {known})"
            raise ConfigError(msg)
        _check_no_clash(src, names)
        if isinstance(cols, Mapping):
            check_types(cfg, src, cols)


def check_types(cfg: PipelineConfig, src: SourceConfig, types: Mapping[str, str | None]) -> None:
    """Each aggregation takes its column's type: ``sum(flight_id)`` of a string column is one line.

    Columns not in ``types``, or typed None, are not judged (``check_columns`` names a missing one).
    """
    for agg in cfg.window.aggregations:
        typ = types.get(agg.column)
        problem = None if typ is None else type_problem(agg, typ)
        if problem is None:
            continue
        where = f" in source {src.name!r}" if src.named else ""
        hint = ""
        if type_class(typ or "") == ORDERED and typ == "string":
            hint = f"; if it holds numbers as text, declare it a number in {src.key('schema')} (e.g. DOUBLE)"
        msg = f"window.aggregations.{agg.name}: {problem}{where}{hint}"
        raise ConfigError(msg)


def _check_no_clash(src: SourceConfig, names: set[str]) -> None:
    """No input column has the name of one the outputs add to each late row and dead letter."""
    clash = [c for c in ROW_OUTPUT_COLUMNS if c in names]
    if clash:
        where = f"source {src.name!r} has" if src.named else "the input has"
        msg = (f"source: {where} a column named {clash[0]!r}, which late/ and dead_letter/ add to each row's "
               f"own columns ({', '.join(ROW_OUTPUT_COLUMNS)}); rename that column in the input")
        raise ConfigError(msg)
    if src.named and SOURCE_COLUMN in names:  # [[source]] tables: each late row and dead letter names its source
        msg = (f"source.{src.name}: its column {SOURCE_COLUMN!r} clashes with the outputs' {SOURCE_COLUMN!r} column "
               "(the source of each late row and dead letter); rename it")
        raise ConfigError(msg)


def load_config(path: str | Path, overrides: list[str] | None = None) -> PipelineConfig:
    """Read and validate a ``lowwater run`` TOML file."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except FileNotFoundError:
        msg = f"configuration file not found: {p}"
        raise ConfigError(msg) from None
    except tomllib.TOMLDecodeError as e:
        msg = f"{p}: not valid TOML: {e}"
        raise ConfigError(msg) from None
    data = apply_overrides(data, overrides or [])
    return parse_config(data, base_dir=p.resolve().parent)


def _check_sections(data: dict[str, Any]) -> None:
    """Unknown sections and keys first, so a typo is reported before what it causes."""
    for section, value in data.items():
        if section not in SECTIONS:
            msg = f"unknown section [{section}] (expected one of {', '.join(sorted(SECTIONS))})"
            raise ConfigError(msg)
        if section == "source" and (isinstance(value, list) or (isinstance(value, dict)
                                                                and value.get("format") == "kafka")):
            continue  # [[source]] tables and a Kafka source: checked with their own keys (config/source.py)
        table(section, value)
        keys = SECTIONS[section]
        if keys is not None:
            check_keys(section, value, keys)
    for section in ("source", "output", *(() if "join" in data else ("window",))):
        if section not in data:
            msg = f"missing section [{section}]"
            raise ConfigError(msg)


def parse_config(data: dict[str, Any], base_dir: Path | str = ".") -> PipelineConfig:
    """Validate a configuration dict; every error names its key."""
    base = Path(base_dir)
    _check_sections(data)
    sources, named = parse_sources(data, base)
    join = None
    if "join" in data:
        if not named or len(sources) < 2:
            msg = "[join] joins two named sources: declare them as [[source]] tables with a name each"
            raise ConfigError(msg)
        join = parse_join(data["join"], sources)
        if "window" in data:  # windows after the join, over its joined rows
            join = parse_join_window(data["window"], join)
    window = parse_window(data["window"]) if join is None else JOIN_WINDOW_AFTER if join.window else JOIN_WINDOW
    early, interval = parse_trigger(data.get("trigger", {}))
    if join is not None and early is not None:
        msg = "trigger.early: early firings are for windows; a [join] emits each pair when its second row arrives"
        raise ConfigError(msg)
    policy = parse_late(data.get("late", {}))
    output = parse_output(data["output"], base)
    spark = parse_spark(data.get("spark", {}))
    observe = parse_observe(data.get("observe", {}), base)
    alerts = parse_alerts(data.get("alerts"))
    return PipelineConfig(
        sources=sources,
        window=window,
        late_policy=policy,
        output=output,
        spark=spark,
        base_dir=str(base),
        early=early,
        trigger_interval_us=interval,
        named_sources=named,
        join=join,
        observe=observe,
        alerts=alerts,
    )
