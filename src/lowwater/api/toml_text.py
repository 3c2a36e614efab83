"""A configuration dict written back as TOML: what ``pipeline.to_toml()`` returns.

Only the shapes a configuration holds: sections of scalars, lists and inline
tables, and ``[[source]]`` arrays of tables. ``tomllib.loads`` of the text
gives the same dict back (tested), so ``Pipeline.from_toml`` of it builds the
same :class:`~lowwater.config.PipelineConfig`.
"""

from __future__ import annotations

import json
import re
from typing import Any

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def dumps(data: dict[str, Any]) -> str:
    """``data`` (section -> table, or ``source`` -> list of tables) as TOML text.

    >>> print(dumps({"window": {"type": "tumbling", "size": "1m", "aggregations": {"total": "sum(amount)"}}}))
    [window]
    type = "tumbling"
    size = "1m"
    aggregations = { total = "sum(amount)" }
    <BLANKLINE>
    """
    out: list[str] = []
    for section, value in data.items():
        if isinstance(value, list):
            for table in value:
                out.append(f"[[{_key(section)}]]")
                out += [f"{_key(k)} = {_value(v)}" for k, v in table.items()]
                out.append("")
            continue
        out.append(f"[{_key(section)}]")
        out += [f"{_key(k)} = {_value(v)}" for k, v in value.items()]
        out.append("")
    return "\n".join(out)


def _key(key: str) -> str:
    return key if _BARE.match(key) else json.dumps(key)


def _value(v: Any) -> str:  # noqa: ANN401 - any TOML value
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + " }" if v else "{}"
    msg = f"cannot write {v!r} ({type(v).__name__}) as TOML"
    raise TypeError(msg)


def inline(table: dict[str, Any]) -> str:
    """``table`` as one TOML inline table (``{ strategy = "bounded", ... }``), as ``whatif --compare`` takes one."""
    return _value(table)
