"""The windowed operator (tumbling, hopping): operator (driver side), executor (the contributions pass),
fold (the Spark SQL fold and its state layout)."""

from __future__ import annotations

from lowwater.spark.operators.protocol import OperatorContext
from lowwater.spark.operators.registry import register_operator
from lowwater.spark.operators.windowed.operator import WindowedOperator, aggregate_layout


def windowed(ctx: OperatorContext) -> WindowedOperator:
    layout = aggregate_layout(ctx.cfg, ctx.inputs)
    return WindowedOperator(ctx, layout)


register_operator("windowed", windowed)  # window.type tumbling, hopping (config/window.py)
