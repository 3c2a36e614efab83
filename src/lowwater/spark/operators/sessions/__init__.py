"""The session operator: operator (driver side), executor (the keyed pass running the core SessionMachine)."""

from __future__ import annotations

from lowwater.spark.operators.protocol import OperatorContext
from lowwater.spark.operators.registry import register_operator
from lowwater.spark.operators.sessions.operator import SessionOperator
from lowwater.spark.operators.windowed.operator import aggregate_layout


def sessions(ctx: OperatorContext) -> SessionOperator:
    layout = aggregate_layout(ctx.cfg, ctx.inputs)
    return SessionOperator(ctx, layout)


register_operator("sessions", sessions)  # window.type session (config/window.py)
