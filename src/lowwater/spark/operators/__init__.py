"""Operators: one package per operator, each registered by name (``registry.register_operator``).

An operator package holds its driver side (``operator``), its pass on the
executors (``executor``) and its state layout; the engine and the planner
import none of them. Importing this package registers the built-in ones.
"""

from __future__ import annotations

from lowwater.spark.operators import join, sessions, windowed  # noqa: F401 - each registers its operator
from lowwater.spark.operators.join.operator import JoinOperator
from lowwater.spark.operators.protocol import OperatorContext, OperatorFactory, WindowOperator
from lowwater.spark.operators.registry import OPERATORS, build_operator, register_operator, unregister_operator
from lowwater.spark.operators.sessions.operator import SessionOperator
from lowwater.spark.operators.windowed.operator import WindowedOperator

__all__ = [
    "OPERATORS", "JoinOperator", "OperatorContext", "OperatorFactory", "SessionOperator", "WindowOperator",
    "WindowedOperator", "build_operator", "register_operator", "unregister_operator",
]
