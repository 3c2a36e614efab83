"""``[join]`` with ``[window]``: windows over the join's output, driven by its held output watermark.

::

    [join]
    left = "clicks"
    right = "orders"
    on = ["campaign"]
    upper = "1h"
    columns = { left = ["click_id"], right = ["amount"] }

    [window]                 # over joined rows: their key and aggregates are joined/'s columns
    type = "tumbling"
    size = "1h"
    key = ["campaign"]
    aggregations = { orders = "count(amount)", revenue = "sum(amount)" }

A joined row's event time is the later of its two rows' (Flink's interval
join stamps its output so; after a temporal join that is the left row's, the
version being no later); an unmatched left row carries its own. Every aggregate of a tumbling or hopping window is
kept, first/last by event time and ``collect_list`` ordered by a joined row's arrival order
(``core/join_windows.joined_arrival``). The window's ``W`` is the join's held output watermark
(SEMANTICS.md §2, ``core/join_windows.py``). The pipeline keeps
:data:`JOIN_WINDOW_AFTER` as its ``window`` (no verdict on the inputs but the
join's); the window after the join is ``JoinConfig.window``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lowwater.config.errors import ConfigError
from lowwater.config.join import JOIN_WINDOW, JoinConfig
from lowwater.config.window import parse_window

# The placeholder window of a join with windows after it: its type selects that operator.
JOIN_WINDOW_AFTER = replace(JOIN_WINDOW, type="join_window")
JOIN_WINDOW_TYPES = ("tumbling", "hopping")


def parse_join_window(win: Any, join: JoinConfig) -> JoinConfig:  # noqa: ANN401 - a TOML table
    """``join`` with its ``[window]`` checked against the joined rows' columns; every error is one line."""
    if not isinstance(win, dict):
        msg = "[window]: expected a table"
        raise ConfigError(msg)
    window = parse_window(win)
    if window.type not in JOIN_WINDOW_TYPES:
        msg = (f"window.type: {window.type!r} after a [join] is not supported "
               f"(windows after a join are {' or '.join(JOIN_WINDOW_TYPES)})")
        raise ConfigError(msg)
    joined = join.output_columns()
    for role, names in (("window.key", window.key), ("window.aggregations", window.value_columns)):
        for c in names:
            if c not in joined:
                msg = (f"{role}: column {c!r} is not a column of the joined rows (after a [join] the window reads "
                       f"joined/'s columns: {', '.join(joined)}; choose it in join.columns)")
                raise ConfigError(msg)
    return replace(join, window=window)
