"""Window operators: one module per window type, registered by ``window.type`` (see ``protocol.py``)."""

from __future__ import annotations

from lowwater.spark.operators.protocol import OperatorFactory, WindowOperator
from lowwater.spark.operators.sessions import SessionOperator
from lowwater.spark.operators.windowed import WindowedOperator

OPERATORS: dict[str, OperatorFactory] = {
    "tumbling": WindowedOperator,
    "hopping": WindowedOperator,
    "session": SessionOperator,
}

__all__ = ["OPERATORS", "SessionOperator", "WindowOperator", "WindowedOperator"]
