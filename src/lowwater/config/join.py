"""``[join]``: an interval or temporal join of two named sources (SEMANTICS.md §9; ``spark/operators/join/``).

::

    [join]
    left = "clicks"
    right = "orders"
    on = ["user_id"]
    lower = "0s"        # right.event_time - left.event_time >= lower (may be negative: "-5s")
    upper = "30m"       # right.event_time - left.event_time <= upper
    type = "inner"      # inner | left_outer
    columns = { left = ["user_id", "click_id", "page"], right = ["order_id", "amount"] }

or a temporal (stream-table) join: ``kind = "temporal"``, no ``lower``/``upper``;
each left row joins the right row of its key valid at its event time
(``core/temporal_join.py``)::

    [join]
    kind = "temporal"
    left = "payments"
    right = "rates"
    on = ["currency"]
    type = "left_outer"  # inner: a payment with no rate yet is counted unmatched
    columns = { left = ["payment_id", "amount"], right = ["rate"] }

A join pipeline alone carries :data:`JOIN_WINDOW`, whose ``type`` names the
join operator and which nothing judges with; with a ``[window]`` the window runs over
the joined rows (``config/join_window.py``, ``window`` below).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lowwater.config.errors import ConfigError, check_keys, duration, table, text
from lowwater.config.source import SourceConfig
from lowwater.config.window import WindowConfig
from lowwater.core.join import JoinBounds, JoinType
from lowwater.core.temporal_join import TEMPORAL_BOUNDS, JoinKind

JOIN_KEYS = frozenset({"kind", "left", "right", "on", "lower", "upper", "type", "columns"})
JOIN_KINDS = tuple(k.value for k in JoinKind)
JOIN_TYPES = tuple(t.value for t in JoinType)
# Output columns of joined/ that a chosen column may not be named after.
JOIN_RESERVED = frozenset({"left_event_time", "right_event_time", "watermark", "batch_id"})

# What a join pipeline carries as its window: only its type is read (it names the operator registered as
# "join"). Nothing judges with it: the join judges its rows from W(r) and the planner assigns it no window
# (the operator's `window_verdicts`); its fields are what join checkpoints' fingerprints record.
JOIN_WINDOW = WindowConfig(
    type="join", size_us=2**61, slide_us=None, offset_us=0, allowed_lateness_us=0, key=(), aggregations=(),
)


@dataclass(frozen=True)
class JoinConfig:
    """Two sources joined on equal ``on`` keys within ``bounds``; the chosen columns of each side."""

    left: str
    right: str
    on: tuple[str, ...]
    bounds: JoinBounds
    type: JoinType
    left_columns: tuple[str, ...]
    right_columns: tuple[str, ...]
    window: WindowConfig | None = None  # [window] over the joined rows (config/join_window.py)
    kind: JoinKind = JoinKind.INTERVAL  # temporal: right is a versioned table (core/temporal_join.py)

    def side_of(self, source: str) -> str | None:
        return "left" if source == self.left else "right" if source == self.right else None

    def columns_of(self, side: str) -> tuple[str, ...]:
        """What the join reads from a side: its keys, then its chosen columns."""
        chosen = self.left_columns if side == "left" else self.right_columns
        return tuple(dict.fromkeys([*self.on, *chosen]))

    def output_columns(self) -> list[str]:
        """joined/'s payload columns: the keys once, then each side's chosen columns (without the keys)."""
        return list(dict.fromkeys([*self.on, *self.left_columns, *self.right_columns]))


def signed_duration(key: str, value: Any) -> int:
    """A duration that may be negative (``"-5s"``), in µs."""
    if isinstance(value, str) and value.strip().startswith("-"):
        return -duration("join", key, value.strip()[1:])
    if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
        return -duration("join", key, -value)
    return duration("join", key, value)


def _names(key: str, value: Any, empty: bool = False) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or (not value and not empty) or not all(isinstance(v, str) and v for v in value):
        msg = f"join.{key}: expected a list of column names, got {value!r}"
        raise ConfigError(msg)
    return tuple(value)


def parse_join(t: Any, sources: tuple[SourceConfig, ...]) -> JoinConfig:
    """Validate ``[join]`` against the sources; every error is one line naming the key."""
    t = table("join", t)
    check_keys("join", t, JOIN_KEYS)
    kind = t.get("kind", JoinKind.INTERVAL.value)
    if kind not in JOIN_KINDS:
        msg = f"join.kind: expected one of {', '.join(JOIN_KINDS)}, got {kind!r}"
        raise ConfigError(msg)
    temporal = kind == JoinKind.TEMPORAL
    for key in ("lower", "upper"):
        if temporal and key in t:
            msg = (f"join.{key}: not for kind = \"temporal\" (a left row joins the right side's version valid at "
                   "its event time; no bounds)")
            raise ConfigError(msg)
    for key in ("left", "right", "on", *(() if temporal else ("upper",))):
        if key not in t:
            msg = f"join.{key}: missing"
            raise ConfigError(msg)
    names = [s.name for s in sources]
    left, right = text("join", "left", t["left"]), text("join", "right", t["right"])
    for key, name in (("left", left), ("right", right)):
        if name not in names:
            msg = f"join.{key}: unknown source {name!r} (the [[source]] tables are: {', '.join(names)})"
            raise ConfigError(msg)
    if left == right:
        msg = f"join.right: the same source as join.left ({left!r}); a join needs two sources"
        raise ConfigError(msg)
    others = [n for n in names if n not in (left, right)]
    if others:
        msg = f"[join] reads exactly its two sources; source {others[0]!r} is neither join.left nor join.right"
        raise ConfigError(msg)
    bounds = TEMPORAL_BOUNDS
    if not temporal:
        bounds = _bounds(t)
    jtype = t.get("type", "inner")
    if jtype not in JOIN_TYPES:
        msg = f"join.type: expected one of {', '.join(JOIN_TYPES)}, got {jtype!r}"
        raise ConfigError(msg)
    on = _names("on", t["on"])
    cols = t.get("columns", {})
    cols = table("join.columns", cols)
    check_keys("join.columns", cols, ("left", "right"))
    chosen = {side: _names(f"columns.{side}", cols[side], empty=True) if side in cols else ()
              for side in ("left", "right")}
    for side, columns in chosen.items():
        for c in columns:
            if c in JOIN_RESERVED:
                msg = f"join.columns.{side}: column {c!r} clashes with joined/'s own {c!r} column"
                raise ConfigError(msg)
    clash = (set(chosen["left"]) & set(chosen["right"])) - set(on)
    if clash:
        msg = (f"join.columns: {sorted(clash)[0]!r} is chosen from both sides; joined/ has one column per name "
               "(choose it from one side)")
        raise ConfigError(msg)
    return JoinConfig(left, right, on, bounds, JoinType(jtype), chosen["left"], chosen["right"], kind=JoinKind(kind))


def _bounds(t: dict[str, Any]) -> JoinBounds:
    """An interval join's ``lower`` and ``upper``."""
    lower = signed_duration("lower", t.get("lower", "0s"))
    upper = signed_duration("upper", t["upper"])
    if lower > upper:
        msg = f"join.lower ({t.get('lower')}) is after join.upper ({t['upper']}): no pair could ever match"
        raise ConfigError(msg)
    return JoinBounds(lower, upper)


def check_join_columns(join: JoinConfig, source: str, columns: set[str]) -> None:
    """The join's key and chosen columns of ``source``'s side exist in its schema."""
    side = join.side_of(source)
    if side is None:
        return
    for c in join.columns_of(side):
        if c not in columns:
            role = "join.on" if c in join.on else f"join.columns.{side}"
            known = ", ".join(sorted(columns))
            msg = f"{role}: column {c!r} is missing from source {source!r} (its columns: {known})"
            raise ConfigError(msg)
