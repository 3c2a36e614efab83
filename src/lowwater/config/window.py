"""``[window]``: the window type and size, the grouping key, the aggregations, the accumulation mode."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lowwater.config.errors import ConfigError, duration
from lowwater.core.aggregates import AggSpec, value_columns, value_inputs
from lowwater.core.lateness import AllowedLateness
from lowwater.core.triggers import AccumulationMode
from lowwater.core.windows import HoppingWindows, SessionWindows, TumblingWindows

# ``window.type`` values ``[window]`` accepts, and the operator (``spark/operators/``) each one runs: the
# built-in ones here (the configuration is checked before Spark starts); an operator's registration
# (``spark.operators.register_operator(name, factory, window_types=...)``) adds its own. A registered type is
# sized like a tumbling window (``size``, ``offset``): the planner's verdicts use it. The join's placeholder
# window (config/join.py) is no ``[window]`` type; it names the join operator.
WINDOW_TYPES: list[str] = ["tumbling", "hopping", "session"]
OPERATOR_OF: dict[str, str] = {
    "tumbling": "windowed", "hopping": "windowed", "session": "sessions", "join": "join", "join_window": "join_window",
}
ACCUMULATION_MODES = tuple(m.value for m in AccumulationMode)
WINDOW_KEYS = frozenset({
    "type", "size", "slide", "offset", "gap", "allowed_lateness", "key", "aggregations", "accumulation",
})
# Output columns an aggregation may not be named after.
RESERVED = frozenset({"count", "window_start", "window_end", "kind", "revision", "watermark", "batch_id"})


@dataclass(frozen=True)
class WindowConfig:
    """``type`` is tumbling (``size``), hopping (``size``, ``slide``) or session (``gap``; ``size_us`` is 0)."""

    type: str
    size_us: int
    slide_us: int | None
    offset_us: int
    allowed_lateness_us: int
    key: tuple[str, ...]
    aggregations: tuple[AggSpec, ...]
    accumulation: str = "accumulating"
    gap_us: int | None = None

    @property
    def operator(self) -> str:
        """The operator that runs this window type (:data:`OPERATOR_OF`)."""
        return OPERATOR_OF[self.type]

    @property
    def is_session(self) -> bool:
        return self.type == "session"

    def assigner(self) -> TumblingWindows | HoppingWindows | SessionWindows:
        if self.type == "hopping":
            assert self.slide_us is not None
            return HoppingWindows(self.size_us, self.slide_us, self.offset_us)
        if self.type == "session":
            assert self.gap_us is not None
            return SessionWindows(self.gap_us)
        return TumblingWindows(self.size_us, self.offset_us)

    @property
    def lateness(self) -> AllowedLateness:
        return AllowedLateness(self.allowed_lateness_us)

    @property
    def value_columns(self) -> list[str]:
        return value_columns(list(self.aggregations))

    @property
    def value_inputs(self) -> list[tuple[str, str]]:
        """The partial's value inputs: (column, what of it), ``core/aggregates.value_inputs``."""
        return value_inputs(list(self.aggregations))


def register_window_type(wtype: str, operator: str) -> None:
    """Make ``window.type = "<wtype>"`` a window type that ``operator`` runs (sized like a tumbling window)."""
    if wtype in OPERATOR_OF:
        msg = f"window type {wtype!r} is registered already (operator {OPERATOR_OF[wtype]!r})"
        raise ValueError(msg)
    WINDOW_TYPES.append(wtype)
    OPERATOR_OF[wtype] = operator


def unregister_window_type(wtype: str) -> None:
    """Undo :func:`register_window_type` (a test's toy operator)."""
    if wtype in WINDOW_TYPES:
        WINDOW_TYPES.remove(wtype)
    del OPERATOR_OF[wtype]


def _extent(win: dict[str, Any], wtype: str) -> tuple[int, int | None, int | None]:
    """(size, slide, gap) in µs, each checked against the window type."""
    gap = None
    if wtype == "session":
        for k in ("size", "slide", "offset"):
            if k in win:
                msg = f"window.{k}: not for type = \"session\" (a session is sized by window.gap)"
                raise ConfigError(msg)
        if "gap" not in win:
            msg = "window.gap is required for a session window"
            raise ConfigError(msg)
        gap = duration("window", "gap", win["gap"])
        if gap <= 0:
            msg = "window.gap: must be positive"
            raise ConfigError(msg)
    elif "gap" in win:
        msg = "window.gap: only for type = \"session\""
        raise ConfigError(msg)
    elif "size" not in win:
        msg = "window.size is required"
        raise ConfigError(msg)
    size = 0 if wtype == "session" else duration("window", "size", win["size"])
    if size <= 0 and wtype != "session":
        msg = "window.size: must be positive"
        raise ConfigError(msg)
    slide = None
    if wtype == "hopping":
        if "slide" not in win:
            msg = "window.slide is required for a hopping window"
            raise ConfigError(msg)
        slide = duration("window", "slide", win["slide"])
        if slide <= 0 or size % slide:
            msg = "window.slide: must be positive and divide window.size"
            raise ConfigError(msg)
    elif "slide" in win:
        msg = "window.slide: only for type = \"hopping\""
        raise ConfigError(msg)
    return size, slide, gap


def _aggregations(win: dict[str, Any], keys: list[str]) -> tuple[AggSpec, ...]:
    aggs_raw = win.get("aggregations", {})
    if not isinstance(aggs_raw, dict):
        msg = "window.aggregations: expected a table name = \"func(column)\""
        raise ConfigError(msg)
    aggs = []
    for name, expr in aggs_raw.items():
        if name in RESERVED or name in keys:
            msg = f"window.aggregations.{name}: the name is taken by an output column"
            raise ConfigError(msg)
        try:
            aggs.append(AggSpec.parse(name, expr))
        except ValueError as e:
            msg = f"window.aggregations.{name}: {e}"
            raise ConfigError(msg) from None
    return tuple(aggs)


def parse_window(win: dict[str, Any]) -> WindowConfig:
    """``[window]``; every error names its key."""
    wtype = win.get("type", "tumbling")
    if wtype not in WINDOW_TYPES:
        msg = f"window.type: {wtype!r} is not one of {', '.join(WINDOW_TYPES)}"
        raise ConfigError(msg)
    size, slide, gap = _extent(win, wtype)
    keys = win.get("key", [])
    if isinstance(keys, str):
        keys = [keys]
    if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
        msg = "window.key: expected a list of column names"
        raise ConfigError(msg)
    taken = [k for k in keys if k in RESERVED]
    if taken:  # results/ would hold two columns of that name (Spark refuses to write it)
        msg = (f"window.key: {taken[0]!r} is the name of a column results/ adds ({', '.join(sorted(RESERVED))}); "
               "key on a column named otherwise")
        raise ConfigError(msg)
    aggs = _aggregations(win, keys)
    accumulation = win.get("accumulation", "accumulating")
    if accumulation not in ACCUMULATION_MODES:
        msg = f"window.accumulation: {accumulation!r} is not one of {', '.join(ACCUMULATION_MODES)}"
        raise ConfigError(msg)
    return WindowConfig(
        type=wtype,
        size_us=size,
        slide_us=slide,
        offset_us=duration("window", "offset", win.get("offset", "0s")),
        allowed_lateness_us=duration("window", "allowed_lateness", win.get("allowed_lateness", "0s")),
        key=tuple(keys),
        aggregations=aggs,
        accumulation=accumulation,
        gap_us=gap,
    )
