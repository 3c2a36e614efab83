"""How a session's partial values travel between Spark and the core session machine (ADR 0038).

The machine keeps a partial as a flat Python list (``core/partials.py``): numbers, and for the other value inputs
a by-time tuple ``(e, b, s, m, v)``, a ``Collection`` or a sketch (``core/partial_values.py``), merged by their own
``+``/``min``/``max``. The stored state reaches the executors as Spark's ``to_json`` of its row (a struct is an
object whose null fields are left out, an array a list, bytes base64); results and state leave as Arrow columns of
the state schema's types (a struct a tuple, an array a list, a sketch its bytes); a retraction's values are kept in
state as the same JSON. One :class:`Slot` per position of the flat partial says how its value crosses; the min/max
of a collection or sketch and the sum of a by-time input are never read, and cross as null.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from lowwater.core.partials import BY_TIME, COLLECTED, HLL, KLL, LIST, SET, Collection, Quantiles, Sketch
from lowwater.spark.aggtypes import from_json, partial_kinds, value_kind
from lowwater.spark.operators.windowed.fold import StateLayout

NULLED = "null"  # a field nobody reads: it crosses as null
_TIME = "ebsm"  # a by-time struct's arrival fields: event µs, step, ``_seq``, ``_seq_minor`` (then ``v``)


@dataclass(frozen=True)
class Slot:
    """One position of a flat partial: ``of`` its value input (``""``: a number, as ``kind`` travels)."""

    kind: str  # how a value (a number, or the values inside a struct or collection) travels: ``aggtypes.value_kind``
    of: str = ""

    @property
    def plain(self) -> bool:
        return not self.of

    def load(self, v: object) -> object:
        """A value as Spark's ``to_json`` (or :meth:`to_json`) wrote it, read with ``parse_float=Decimal``."""
        if not self.of:  # a value as it travels (a number, text, an ordinal): every position of most pipelines
            return from_json(self.kind, v)
        if v is None or self.of == NULLED:
            return None
        if self.of == BY_TIME:
            return self._timed(v)
        if self.of == SET:
            return Collection(tuple(from_json(self.kind, x) for x in v), unique=True)  # type: ignore[union-attr]
        if self.of == LIST:
            return Collection(tuple(self._timed(x) for x in v), unique=False)  # type: ignore[union-attr]
        if self.of == HLL:
            return Sketch(base64.b64decode(v))  # type: ignore[arg-type]
        return Quantiles(base64.b64decode(v))  # type: ignore[arg-type]

    def _timed(self, d: object) -> tuple:
        return (*(int(d[c]) for c in _TIME), from_json(self.kind, d.get("v")))  # type: ignore[index,union-attr]

    def to_arrow(self, v: object) -> object:
        """The value as Arrow builds the state schema's type from it."""
        if v is None or self.of == NULLED:
            return None
        if self.of in (SET, LIST):
            return list(v.items)  # type: ignore[union-attr]
        if self.of in (HLL, KLL):
            return v.data  # type: ignore[union-attr]
        return v  # a number, or a by-time tuple in the struct's field order

    def to_json(self, v: object) -> object:
        """The value as :meth:`load` reads it back (a Decimal is left to ``json.dumps(default=str)``)."""
        if v is None or self.of == NULLED:
            return None
        if self.of == BY_TIME:
            return dict(zip(_TIME + "v", v, strict=True))  # type: ignore[call-overload]
        if self.of == SET:
            return list(v.items)  # type: ignore[union-attr]
        if self.of == LIST:
            return [dict(zip(_TIME + "v", x, strict=True)) for x in v.items]  # type: ignore[union-attr]
        if self.of in (HLL, KLL):
            return base64.b64encode(v.data).decode("ascii")  # type: ignore[union-attr]
        return v


def slots(layout: StateLayout) -> list[Slot]:
    """The :class:`Slot` of every position of ``layout``'s flat partial ``[n, s0, mn0, mx0, nn0, ...]``."""
    n = len(layout.values)
    kinds = partial_kinds([layout.value_type(j) for j in range(n)])
    out = []
    for (_, f, i), kind in zip(layout.partial_fields(), kinds, strict=True):
        of = layout.input_of(i) if i is not None else ""
        if f.counts or of not in (BY_TIME, *COLLECTED):
            out.append(Slot(kind))
            continue
        read = (f.fold == "sum") == (of in COLLECTED)  # a collection's sum, a by-time input's min and max
        out.append(Slot(value_kind(layout.column_type(i or 0)), of if read else NULLED))
    return out


def special_inputs(layout: StateLayout) -> dict[int, str]:
    """The value inputs the machine builds itself from a row's value (``partials.input_value``): index -> input."""
    return {j: layout.input_of(j) for j in range(len(layout.values)) if layout.input_of(j) in (BY_TIME, *COLLECTED)}
