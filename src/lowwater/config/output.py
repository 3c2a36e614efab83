"""``[output]`` and ``[output.postgres]``: where results, late rows, dead letters, metrics (and joined rows) go."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lowwater.config.errors import ConfigError, duration, text
from lowwater.config.overrides import resolve

# [output] kind: Parquet alone, or a sink beside it; io/sink.register_sink adds a kind (its one registration line).
OUTPUT_KINDS = ["parquet", "postgres", "delta"]
OUTPUT_KEYS = frozenset({"path", "checkpoint", "kind", "postgres"})
PG_TABLE_KEYS = (
    "results_table", "late_table", "dead_letter_table", "metrics_table", "batches_table", "joined_table",
)
_PG_KEYS = {"url", "schema", "retries", "backoff", *PG_TABLE_KEYS}
# Unquoted-identifier shape only: no quotes, semicolons, dots or spaces reach SQL text
# (and every identifier is still quoted with psycopg.sql.Identifier).
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
PG_URL_ENV = "LOWWATER_PG_URL"
# The columns late/ and dead_letter/ add to each input row's own, in their order (io/sink.Sinks.prepare_all);
# with [[source]] tables both also get ``source``, first (io/sources.union_payload). An input column of one of
# these names would be there twice, which Spark refuses to write (config/pipeline.check_columns).
LATE_COLUMNS = ("watermark", "window_start", "window_end", "reason", "source_file")
DEAD_LETTER_COLUMNS = ("raw", "reason", "source_file")
ROW_OUTPUT_COLUMNS = tuple(dict.fromkeys([*LATE_COLUMNS, *DEAD_LETTER_COLUMNS]))
SOURCE_COLUMN = "source"


@dataclass(frozen=True)
class PostgresConfig:
    """Where ``[output] kind = "postgres"`` delivers; ``url`` may hold a password (never print it)."""

    url: str
    schema: str = "public"
    results_table: str = "lowwater_results"
    late_table: str = "lowwater_late"
    dead_letter_table: str = "lowwater_dead_letter"
    metrics_table: str = "lowwater_metrics"
    batches_table: str = "lowwater_batches"
    joined_table: str = "lowwater_joined"  # a [join]'s pairs (and unmatched left rows), like joined/
    retries: int = 5
    backoff_s: float = 0.5

    def __repr__(self) -> str:  # the URL may carry a password
        return f"PostgresConfig(schema={self.schema!r}, results_table={self.results_table!r})"


@dataclass(frozen=True)
class OutputConfig:
    path: str
    checkpoint: str
    kind: str = "parquet"
    postgres: PostgresConfig | None = None

    def sub(self, name: str) -> str:
        return f"{self.path.rstrip('/')}/{name}"


def register_output_kind(kind: str) -> None:
    """Accept ``[output] kind = "<kind>"`` (called by ``io/sink.register_sink``, which knows its sink)."""
    if kind not in OUTPUT_KINDS:
        OUTPUT_KINDS.append(kind)


def parse_postgres(p: Any) -> PostgresConfig:
    """``[output.postgres]``: URL (or ``LOWWATER_PG_URL``), validated table names, retry bounds."""
    if not isinstance(p, dict):
        msg = "output.postgres: expected a table"
        raise ConfigError(msg)
    for key in p:
        if key not in _PG_KEYS:
            msg = f"unknown key output.postgres.{key} (expected one of {', '.join(sorted(_PG_KEYS))})"
            raise ConfigError(msg)
    # The environment wins over the file, so a password need not live in the TOML.
    url = os.environ.get(PG_URL_ENV) or p.get("url")
    if not url:
        msg = f"output.postgres.url: required for output.kind = \"postgres\" (or set {PG_URL_ENV})"
        raise ConfigError(msg)
    if not isinstance(url, str) or not url.startswith(("postgresql://", "postgres://")):
        msg = "output.postgres.url: expected postgresql://user:password@host:port/database"
        raise ConfigError(msg)
    names = {}
    for key in ("schema", *PG_TABLE_KEYS):
        if key in p:
            value = p[key]
            if not isinstance(value, str) or not _IDENT.match(value):
                msg = (f"output.postgres.{key}: {value!r} is not a plain SQL identifier "
                       "(letters, digits and _, not starting with a digit, at most 63)")
                raise ConfigError(msg)
            names[key] = value
    tables = [names.get(k, getattr(PostgresConfig, k)) for k in PG_TABLE_KEYS]
    if len(set(tables)) != len(tables):
        msg = "output.postgres: the table names must differ"
        raise ConfigError(msg)
    retries = p.get("retries", 5)
    if not isinstance(retries, int) or isinstance(retries, bool) or not 0 <= retries <= 50:
        msg = f"output.postgres.retries: expected an integer 0..50, got {retries!r}"
        raise ConfigError(msg)
    backoff_us = duration("output.postgres", "backoff", p.get("backoff", "0.5s"))
    if backoff_us <= 0:
        msg = "output.postgres.backoff: must be positive"
        raise ConfigError(msg)
    return PostgresConfig(url=url, retries=retries, backoff_s=backoff_us / 1e6, **names)


def parse_output(o: dict[str, Any], base: Path) -> OutputConfig:
    """``[output]``: paths resolve against the configuration file's directory."""
    if "path" not in o:
        msg = "output.path is required"
        raise ConfigError(msg)
    out_path = resolve(base, text("output", "path", o["path"]))
    ckpt = f"{out_path}/_checkpoint"
    if "checkpoint" in o:
        ckpt = resolve(base, text("output", "checkpoint", o["checkpoint"]))
    kind = o.get("kind", "parquet")
    if kind not in OUTPUT_KINDS:
        msg = f"output.kind: {kind!r} is not one of {', '.join(OUTPUT_KINDS)}"
        raise ConfigError(msg)
    pg = parse_postgres(o.get("postgres", {})) if kind == "postgres" else None
    if kind != "postgres" and "postgres" in o:
        msg = "output.postgres: only with output.kind = \"postgres\""
        raise ConfigError(msg)
    return OutputConfig(out_path, ckpt, kind, pg)
