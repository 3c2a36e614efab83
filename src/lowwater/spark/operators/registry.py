"""Operators by name: one registration line per operator (``register_operator``), no branch in the engine.

A pipeline's operator is its window type's (``config/window.OPERATOR_OF``:
tumbling and hopping run ``windowed``, session ``sessions``, a ``[join]``
``join``). Registering an operator with ``window_types`` makes the
configuration accept them (``config.window.register_window_type``: the config
layer keeps the names, imports go down). The built-in operators register in
their packages' ``__init__``.
"""

from __future__ import annotations

from collections.abc import Sequence

from lowwater.config.window import OPERATOR_OF, register_window_type, unregister_window_type
from lowwater.spark.operators.protocol import OperatorContext, OperatorFactory, WindowOperator

OPERATORS: dict[str, OperatorFactory] = {}


def register_operator(name: str, factory: OperatorFactory, window_types: Sequence[str] = ()) -> None:
    """Make ``factory`` the operator ``name``; ``window_types``: new ``window.type`` values it runs."""
    if name in OPERATORS:
        msg = f"operator {name!r} is registered already"
        raise ValueError(msg)
    for wtype in window_types:
        register_window_type(wtype, name)
    OPERATORS[name] = factory


def unregister_operator(name: str) -> None:
    """Undo :func:`register_operator` (a test's toy operator), its window types included."""
    del OPERATORS[name]
    for wtype in [t for t, op in OPERATOR_OF.items() if op == name]:
        unregister_window_type(wtype)


def build_operator(ctx: OperatorContext) -> WindowOperator:
    """The operator that runs ``ctx.cfg``'s window type, built from ``ctx``."""
    return OPERATORS[ctx.cfg.window.operator](ctx)
