"""The interval and temporal joins: operator (driver side), input (rows in the state layout), executor (the keyed
pass), windows (a [window] over the joined rows)."""

from __future__ import annotations

from lowwater.spark.operators.join.operator import JoinOperator
from lowwater.spark.operators.join.windows import JoinWindowOperator
from lowwater.spark.operators.protocol import OperatorContext
from lowwater.spark.operators.registry import register_operator
from lowwater.spark.operators.windowed.operator import aggregate_layout


def join(ctx: OperatorContext) -> JoinOperator:
    layout = aggregate_layout(ctx.cfg, ctx.inputs)  # no key, no aggregate: results/'s empty window columns
    return JoinOperator(ctx, layout)


register_operator("join", join)  # a [join] pipeline (config/join.JOIN_WINDOW)


def join_window(ctx: OperatorContext) -> JoinWindowOperator:
    layout = aggregate_layout(ctx.cfg, ctx.inputs, ctx.cfg.result_window)  # the window over the joined rows
    return JoinWindowOperator(ctx, layout)


register_operator("join_window", join_window)  # [join] with [window] (config/join_window.JOIN_WINDOW_AFTER)
