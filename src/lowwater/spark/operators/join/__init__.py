"""The interval join: operator (driver side), input (rows in the state layout), executor (the keyed pass)."""

from __future__ import annotations

from lowwater.spark.operators.join.operator import JoinOperator
from lowwater.spark.operators.protocol import OperatorContext
from lowwater.spark.operators.registry import register_operator
from lowwater.spark.operators.windowed.operator import aggregate_layout


def join(ctx: OperatorContext) -> JoinOperator:
    layout = aggregate_layout(ctx.cfg, ctx.inputs)  # no key, no aggregate: results/'s empty window columns
    return JoinOperator(ctx.cfg, ctx.spark, layout, ctx.state_dir, ctx.sinks, ctx.inputs, ctx.clock)


register_operator("join", join)  # a [join] pipeline (config/join.JOIN_WINDOW)
