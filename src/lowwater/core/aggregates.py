"""Aggregations over a window's admitted rows: ``count`` plus ``sum/min/max/avg``.

Every aggregate is read from mergeable partial state (row count, and per value
column: sum, min, max, non-null count), so on-time rows, late updates and
stored state combine by addition / min / max, and ``avg = sum / non-null``:
the layout and the function -> field mapping are ``core/partials.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lowwater.core.partials import OUTPUTS

FUNCTIONS = tuple(OUTPUTS)  # count, sum, min, max, avg
_AGG = re.compile(rf"^\s*({'|'.join(FUNCTIONS)})\s*\(\s*([A-Za-z_][A-Za-z0-9_.]*)\s*\)\s*$")


@dataclass(frozen=True)
class AggSpec:
    """One output aggregate: ``name = func(column)``."""

    name: str
    func: str
    column: str

    @classmethod
    def parse(cls, name: str, expr: str) -> AggSpec:
        """``AggSpec.parse("total", "sum(amount)")``; raises ValueError when malformed."""
        m = _AGG.match(str(expr))
        if not m:
            msg = f"aggregation {name!r}: {expr!r} is not one of {', '.join(f + '(column)' for f in FUNCTIONS)}"
            raise ValueError(msg)
        return cls(name, m.group(1), m.group(2))


def value_columns(specs: list[AggSpec]) -> list[str]:
    """Distinct input columns the aggregates read, in first-use order."""
    out: list[str] = []
    for s in specs:
        if s.column not in out:
            out.append(s.column)
    return out
