"""Window operators: one module per window type, registered by ``window.type`` (see ``protocol.py``).

A ``[join]`` pipeline carries ``window.type = "join"`` (config/join.py) and runs the join operator.
"""

from __future__ import annotations

from lowwater.spark.operators.join.operator import JoinOperator
from lowwater.spark.operators.protocol import OperatorFactory, WindowOperator
from lowwater.spark.operators.sessions.operator import SessionOperator
from lowwater.spark.operators.windowed.operator import WindowedOperator

OPERATORS: dict[str, OperatorFactory] = {
    "tumbling": WindowedOperator,
    "hopping": WindowedOperator,
    "session": SessionOperator,
    "join": JoinOperator,
}

__all__ = ["OPERATORS", "JoinOperator", "SessionOperator", "WindowOperator", "WindowedOperator"]
