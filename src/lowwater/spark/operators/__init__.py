"""Window operators: one module per window type, registered by ``window.type`` (see ``protocol.py``).

A ``[join]`` pipeline carries ``window.type = "join"`` (config/join.py) and runs the join operator;
with a ``[window]`` after it, ``"join_window"`` (config/join_window.py) and the join-then-window operator.
"""

from __future__ import annotations

from lowwater.spark.operators.join import JoinOperator
from lowwater.spark.operators.join_windows import JoinWindowOperator
from lowwater.spark.operators.protocol import OperatorFactory, WindowOperator
from lowwater.spark.operators.sessions import SessionOperator
from lowwater.spark.operators.windowed import WindowedOperator

OPERATORS: dict[str, OperatorFactory] = {
    "tumbling": WindowedOperator,
    "hopping": WindowedOperator,
    "session": SessionOperator,
    "join": JoinOperator,
    "join_window": JoinWindowOperator,
}

__all__ = ["OPERATORS", "JoinOperator", "JoinWindowOperator", "SessionOperator", "WindowOperator", "WindowedOperator"]
