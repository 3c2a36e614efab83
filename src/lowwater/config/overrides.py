"""Paths and ``--set`` overrides: what the command line changes in the TOML before it is validated.

``--set section.key=value`` sets one key (the value is read as TOML if it
parses, else kept as text). With ``[[source]]`` tables a source's key is
``source.<name>.<key>``, its watermark's ``source.<name>.watermark.<key>``::

    --set source.path=landing/today                               # one [source]
    --set source.radar.path=landing/radar2                        # [[source]] name = "radar"
    --set source.radar.watermark.max_out_of_orderness=1s
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from lowwater.config.errors import ConfigError


def resolve(base: Path, p: str) -> str:
    """The one path rule: a relative path resolves against the configuration file's directory.

    That holds for paths written in the file and for ``--set`` values alike, so a
    configuration means the same thing from any working directory. URLs
    (``scheme://``) and absolute paths are kept as written.
    """
    if "://" in p or p.startswith("/"):
        return p
    return str((base / p).resolve())


def parse_override(text: str) -> tuple[list[str], Any]:
    """``section.key=value`` → (path, value); the value is read as TOML if it parses."""
    if "=" not in text:
        msg = f"--set {text!r}: expected section.key=value"
        raise ConfigError(msg)
    key, raw = text.split("=", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    path = key.strip().split(".")
    if len(path) < 2:
        msg = f"--set {text!r}: the key must be section.key"
        raise ConfigError(msg)
    return path, value


def _named_source(data: dict[str, Any], path: list[str], text: str) -> dict[str, Any]:
    """The ``[[source]]`` table ``path[1]`` names (``path`` is ``source.<name>.<key>...``)."""
    tables = [t for t in data["source"] if isinstance(t, dict)]
    names = [str(t.get("name")) for t in tables]
    if len(path) < 3:
        msg = (f"--set {text!r}: with [[source]] tables name the source: source.<name>.{path[1]}=... "
               f"(sources: {', '.join(names)})")
        raise ConfigError(msg)
    for t in tables:
        if t.get("name") == path[1]:
            return t
    msg = f"--set {text!r}: no source is named {path[1]!r} (sources: {', '.join(names)})"
    raise ConfigError(msg)


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``--set`` overrides to the raw TOML dict (validation comes after, as for the file)."""
    for text in overrides:
        path, value = parse_override(text)
        node = data
        parts = path[:-1]
        if path[0] == "source" and isinstance(data.get("source"), list):
            node, parts = _named_source(data, path, text), path[2:-1]
        for part in parts:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                msg = f"--set {text!r}: {part} is not a section"
                raise ConfigError(msg)
        node[path[-1]] = value
    return data
