"""PostgreSQL sink: results, late rows, dead letters, joined rows and metrics, exactly once.

One of the pipeline's sinks (``io/sink.py``), self-contained: it stages the
frame it is given, so it may come before or after the Parquet output, or be
the only sink. A frame several sinks take is persisted by ``Sinks`` while
they write it, so it is computed once and PostgreSQL receives exactly the
rows Parquet has.

Protocol (one step = one micro-batch or the drain):

1. ``begin_step``: the driver deletes whatever an earlier attempt of this step
   left in the staging tables;
2. ``stage``: every executor task COPYs its rows into ``<table>_staging``
   tagged ``(pipeline, step, part)`` in its own transaction, after deleting
   its own ``(pipeline, step, part)`` rows, so a retried task replaces instead
   of adding;
3. ``deliver``: the driver, in ONE transaction, checks the batches table for
   ``(pipeline, step)`` -- present means the step was delivered before a crash
   and is skipped --, else moves staging into the target tables (results are
   upserted on ``(pipeline, key columns, window_start, window_end, kind,
   revision)``), inserts the metrics row and the batch row, and clears the
   step's staging rows.

A ``[join]``'s ``joined`` rows are staged like late rows (from the Parquet
output) and ``deliver`` moves them the same way; :meth:`PostgresSink.write_rows`
stages driver-side rows of a staged kind with the same COPY (part 0).

The engine commits its manifest only after ``deliver`` returned, so a crash
anywhere replays the step, which is then recognised (or redelivered whole).
The connection URL may hold a password: every log and error line masks it.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterator
from datetime import date, datetime
from decimal import Decimal
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg.types.json import Jsonb
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from lowwater.config import PostgresConfig

log = logging.getLogger("lowwater")

T_ = TypeVar("T_")
KINDS = ("results", "late", "dead_letter", "joined")
PIPELINE, STEP, PART = "lw_pipeline", "batch_id", "lw_part"

METRICS_COLUMNS: tuple[tuple[str, str], ...] = (
    ("spark_batch", "bigint"), ("low_watermark", "timestamptz"), ("partition_watermarks", "jsonb"),
    ("idle_partitions", "jsonb"), ("holding_partition", "text"), ("spread_s", "double precision"),
    ("watermark_lag_s", "double precision"),
    *((k, "bigint") for k in ("rows", "on_time", "late_updates", "too_late", "dead_letter", "clipped",
                              "windows_fired", "revisions", "open_windows", "state_bytes")),
    ("duration_s", "double precision"),
    *((k, "bigint") for k in ("out_of_order_files", "out_of_order_rows", "arrival_regressions")),
    *((k, "bigint") for k in ("markers", "regressions")),
    ("partition_lateness_s", "jsonb"), ("source_watermarks", "jsonb"), ("held_rows", "bigint"),
    ("output_watermark", "timestamptz"),
)


class PostgresError(RuntimeError):
    """PostgreSQL stayed unreachable (or refused) through every retry; the step was not committed."""


def mask_url(url: str) -> str:
    """``postgresql://u:secret@h/db`` → ``postgresql://u:***@h/db`` (safe to log)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "postgresql://***"
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _scrub(text: str, url: str) -> str:
    """Remove the URL's password from any message (psycopg may echo connection strings)."""
    try:
        pw = urlsplit(url).password
    except ValueError:
        pw = None
    text = text.replace(url, mask_url(url))
    return text.replace(pw, "***") if pw else text


def with_retries(cfg: PostgresConfig, what: str, fn: Callable[[], T_]) -> T_:
    """Run ``fn`` with bounded exponential backoff on connection-level failures."""
    delay = cfg.backoff_s
    for attempt in range(cfg.retries + 1):
        try:
            return fn()
        except (psycopg.OperationalError, psycopg.InterfaceError) as e:
            reason = _scrub(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__, cfg.url)
            if attempt == cfg.retries:
                msg = (f"PostgreSQL {mask_url(cfg.url)}: {what} failed after {cfg.retries + 1} attempts: "
                       f"{reason}; the step was not committed, a restart delivers it")
                raise PostgresError(msg) from None
            log.warning("PostgreSQL %s: %s failed (%s); retry %d/%d in %.1fs",
                        mask_url(cfg.url), what, reason, attempt + 1, cfg.retries, delay)
            time.sleep(delay)
            delay = min(delay * 2, 30.0)
    raise AssertionError("unreachable")  # pragma: no cover


_PG_TYPES: tuple[tuple[tuple[type, ...], str], ...] = (
    ((T.StringType,), "text"),
    ((T.LongType, T.IntegerType, T.ShortType, T.ByteType), "bigint"),
    ((T.DoubleType, T.FloatType), "double precision"),
    ((T.DecimalType,), "numeric"),
    ((T.BooleanType,), "boolean"),
    ((T.TimestampType,), "timestamptz"),
    ((T.TimestampNTZType,), "timestamp"),
    ((T.DateType,), "date"),
    ((T.BinaryType,), "bytea"),
)


def pg_type(dt: T.DataType) -> str:
    """The column type a Spark type is stored as (arrays, maps and structs as ``jsonb``)."""
    return next((name for types, name in _PG_TYPES if isinstance(dt, types)), "jsonb")


def json_value(v: Any, dt: T.DataType) -> Any:
    """A complex value (as Arrow's ``to_pylist`` gives it) as JSON-able Python, led by its Spark type.

    Maps become objects (keys as text), structs objects, arrays arrays;
    decimals keep every digit (a JSON number, through :func:`json_text`),
    binary is ``\\x<hex>`` (PostgreSQL's bytea text), timestamps and dates ISO
    text, NaN and infinities null (JSON has none).
    """
    if v is None:
        return None
    if isinstance(dt, T.MapType):
        return {str(json_value(k, dt.keyType)): json_value(x, dt.valueType) for k, x in v}
    if isinstance(dt, T.StructType):
        return {f.name: json_value(v.get(f.name), f.dataType) for f in dt.fields}
    if isinstance(dt, T.ArrayType):
        return [json_value(x, dt.elementType) for x in v]
    if isinstance(v, bytes | bytearray):
        return "\\x" + bytes(v).hex()
    if isinstance(v, datetime | date):
        return v.isoformat()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def json_text(v: Any) -> str:
    """JSON text of :func:`json_value`'s output; a Decimal is written as its exact number."""
    if isinstance(v, Decimal):
        return str(v) if v.is_finite() else "null"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {json_text(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(json_text(x) for x in v) + "]"
    return json.dumps(v)


def _json(v: Any, dt: T.DataType) -> str | None:
    return None if v is None else json_text(json_value(v, dt))


def _copy_partition(cfg: PostgresConfig, staging: sql.Composable, pipeline: str, step: int,
                    columns: list[str], jsonish: list[T.DataType | None],
                    ) -> Callable[[Iterator[pa.RecordBatch]], Iterator]:
    """The executor function: COPY one task's rows into staging, replacing an earlier attempt's."""
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in (PIPELINE, STEP, PART, *columns))
    copy_sql = sql.SQL("COPY {} ({}) FROM STDIN").format(staging, cols)
    delete_sql = sql.SQL("DELETE FROM {} WHERE {} = %s AND {} = %s AND {} = %s").format(
        staging, sql.Identifier(PIPELINE), sql.Identifier(STEP), sql.Identifier(PART))

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else 0
        data = list(batches)

        def write() -> int:
            n = 0
            with psycopg.connect(cfg.url, connect_timeout=5) as conn, conn.cursor() as cur:
                cur.execute(delete_sql, (pipeline, step, part))
                with cur.copy(copy_sql) as copy:
                    for b in data:
                        values = [b.column(c).to_pylist() for c in columns]
                        for j, dt in enumerate(jsonish):
                            if dt is not None:
                                values[j] = [_json(v, dt) for v in values[j]]
                        for row in zip(*values, strict=True):
                            copy.write_row((pipeline, step, part, *row))
                            n += 1
            return n

        n = with_retries(cfg, f"staging step {step} part {part}", write)
        yield pa.RecordBatch.from_pydict({"part": [part], "rows": [n]},
                                         schema=pa.schema([("part", pa.int32()), ("rows", pa.int64())]))

    return fn


class PostgresSink:
    """Delivers a step's rows to PostgreSQL in one transaction with its batch id (staged from the frames given)."""

    def __init__(self, cfg: PostgresConfig, pipeline: str, keys: tuple[str, ...]) -> None:
        self.cfg = cfg
        self.pipeline = pipeline
        self.keys = keys
        self.tables = {"results": cfg.results_table, "late": cfg.late_table, "dead_letter": cfg.dead_letter_table,
                       "joined": cfg.joined_table}
        self._columns: dict[str, list[str]] = {}  # kinds whose tables this process created/checked
        self._staged: set[str] = set()
        with_retries(cfg, "creating the metrics and batches tables", self._create_fixed)

    def _id(self, name: str) -> sql.Identifier:
        return sql.Identifier(self.cfg.schema, name)

    def _connect(self) -> psycopg.Connection:
        return psycopg.connect(self.cfg.url, connect_timeout=5)

    def _create_fixed(self) -> None:
        metrics = sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t)) for c, t in METRICS_COLUMNS)
        with self._connect() as conn:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.cfg.schema)))
            conn.execute(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ({} text NOT NULL, {} bigint NOT NULL, {}, PRIMARY KEY ({}, {}))"
            ).format(self._id(self.cfg.metrics_table), sql.Identifier(PIPELINE), sql.Identifier(STEP), metrics,
                     sql.Identifier(PIPELINE), sql.Identifier(STEP)))
            conn.execute(sql.SQL("ALTER TABLE {} {}").format(  # a table from a release with fewer metrics
                self._id(self.cfg.metrics_table), sql.SQL(", ").join(
                    sql.SQL("ADD COLUMN IF NOT EXISTS {} {}").format(sql.Identifier(c), sql.SQL(t))
                    for c, t in METRICS_COLUMNS)))
            conn.execute(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ({} text NOT NULL, {} bigint NOT NULL, spark_batch bigint, "
                "delivered_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY ({}, {}))"
            ).format(self._id(self.cfg.batches_table), sql.Identifier(PIPELINE), sql.Identifier(STEP),
                     sql.Identifier(PIPELINE), sql.Identifier(STEP)))

    def _ensure(self, kind: str, schema: T.StructType) -> list[str]:
        """Create the target and staging tables of ``kind`` from the frame's schema, if missing."""
        columns = [f.name for f in schema.fields]
        if self._columns.get(kind) == columns:
            return columns
        table, staging = self.tables[kind], f"{self.tables[kind]}_staging"
        defs = sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(pg_type(f.dataType))) for f in schema.fields)
        pk = [PIPELINE, *self.keys, "window_start", "window_end", "kind", "revision"]

        def create() -> None:
            with self._connect() as conn:
                conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({} text NOT NULL, {} bigint NOT NULL, {})")
                             .format(self._id(table), sql.Identifier(PIPELINE), sql.Identifier(STEP), defs))
                conn.execute(sql.SQL(
                    "CREATE UNLOGGED TABLE IF NOT EXISTS {} ({} text NOT NULL, {} bigint NOT NULL, "
                    "{} integer NOT NULL, {})"
                ).format(self._id(staging), sql.Identifier(PIPELINE), sql.Identifier(STEP),
                         sql.Identifier(PART), defs))
                if kind != "results":
                    return
                # NULL keys are one key (PostgreSQL 15+), so a replayed NULL-key window upserts too.
                nnd = sql.SQL(" NULLS NOT DISTINCT") if conn.info.server_version >= 150000 else sql.SQL("")
                conn.execute(sql.SQL("CREATE UNIQUE INDEX IF NOT EXISTS {} ON {} ({}){}").format(
                    sql.Identifier(f"{table}_upsert_key"), self._id(table),
                    sql.SQL(", ").join(map(sql.Identifier, pk)), nnd))
                part = sql.SQL(", ").join(map(sql.Identifier, [PIPELINE, *self.keys, "window_start", "window_end"]))
                conn.execute(sql.SQL(
                    "CREATE OR REPLACE VIEW {} AS SELECT DISTINCT ON ({}) * FROM {} WHERE kind <> 'retraction' "
                    "ORDER BY {}, revision DESC, (kind = 'provisional'), {} DESC"
                ).format(self._id(f"{table}_current"), part, self._id(table), part, sql.Identifier(STEP)))

        with_retries(self.cfg, f"creating the {kind} tables", create)
        self._columns[kind] = columns
        return columns

    def ensure_tables(self, kind: str, schema: T.StructType) -> None:
        """Create the tables of ``kind`` before any row arrives, so an empty output is an empty table."""
        self._ensure(kind, schema)

    def prepare(self, kind: str, empty: DataFrame | pa.Table, spark_schema: T.StructType | None = None) -> None:
        """The tables of a staged output exist before any row arrives (the metrics table: at construction)."""
        if kind in KINDS and isinstance(empty, DataFrame):
            self.ensure_tables(kind, empty.schema)

    def write(self, kind: str, step: int, frame: DataFrame) -> None:
        """Stage the step's rows of ``kind`` from the frame given (replacing an earlier attempt's, part by part)."""
        if kind in KINDS:
            self.stage(kind, step, frame)

    def clear(self, kind: str, step: int) -> None:
        """No rows of ``kind``: nothing to stage (:meth:`begin_step` removed an earlier attempt's)."""

    def write_rows(self, kind: str, step: int, table: pa.Table, spark_schema: T.StructType) -> None:
        """Stage a join's ``joined`` rows from the driver; the metrics row is inserted by :meth:`deliver`."""
        if kind not in KINDS:
            return
        columns = self._ensure(kind, spark_schema)
        jsonish = [f.dataType if pg_type(f.dataType) == "jsonb" else None for f in spark_schema.fields]
        fn = _copy_partition(self.cfg, self._id(f"{self.tables[kind]}_staging"), self.pipeline, step,
                             columns, jsonish)
        for _ in fn(iter(table.select(columns).to_batches())):  # no task here: part 0, one transaction
            pass
        self._staged.add(kind)

    def begin_step(self, step: int) -> None:
        """Forget what an earlier, undelivered attempt of ``step`` staged."""
        self._staged.clear()

        def clear() -> None:
            with self._connect() as conn:
                for kind in KINDS:
                    staging = f"{self.tables[kind]}_staging"
                    found = conn.execute("SELECT to_regclass(%s)", (f'"{self.cfg.schema}"."{staging}"',)).fetchone()
                    if found and found[0] is not None:
                        conn.execute(sql.SQL("DELETE FROM {} WHERE {} = %s AND {} = %s").format(
                            self._id(staging), sql.Identifier(PIPELINE), sql.Identifier(STEP)),
                            (self.pipeline, step))

        with_retries(self.cfg, f"clearing staging for step {step}", clear)

    def stage(self, kind: str, step: int, df: DataFrame) -> int:
        """COPY ``df`` into the staging table from the executors; the number of rows staged."""
        columns = self._ensure(kind, df.schema)
        jsonish = [f.dataType if pg_type(f.dataType) == "jsonb" else None for f in df.schema.fields]
        fn = _copy_partition(self.cfg, self._id(f"{self.tables[kind]}_staging"), self.pipeline, step,
                             columns, jsonish)
        try:
            out = df.mapInArrow(fn, "part int, rows long").collect()
        except Exception as e:
            # An executor's PostgresError arrives wrapped in Spark's exception: keep its one line.
            text = str(e)
            if "PostgresError:" not in text:
                raise
            line = next(ln for ln in text.splitlines() if "PostgresError:" in ln)
            raise PostgresError(line.split("PostgresError:", 1)[1].strip()) from None
        self._staged.add(kind)
        return sum(int(r["rows"]) for r in out)

    def deliver(self, step: int, spark_batch: int, metrics: dict[str, Any] | None) -> bool:
        """Move the step's staged rows into the tables with its batch id, atomically; False if done before."""
        return with_retries(self.cfg, f"delivering step {step}", lambda: self._deliver(step, spark_batch, metrics))

    def _deliver(self, step: int, spark_batch: int, metrics: dict[str, Any] | None) -> bool:
        p, s = sql.Identifier(PIPELINE), sql.Identifier(STEP)
        with self._connect() as conn, conn.transaction():
            done = conn.execute(sql.SQL("SELECT 1 FROM {} WHERE {} = %s AND {} = %s FOR UPDATE").format(
                self._id(self.cfg.batches_table), p, s), (self.pipeline, step)).fetchone()
            for kind in sorted(self._staged):
                table, staging = self._id(self.tables[kind]), self._id(f"{self.tables[kind]}_staging")
                if not done:
                    cols = sql.SQL(", ").join(map(sql.Identifier, [PIPELINE, STEP, *self._columns[kind]]))
                    query = sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} WHERE {} = %s AND {} = %s").format(
                        table, cols, cols, staging, p, s)
                    if kind == "results":
                        pk = [PIPELINE, *self.keys, "window_start", "window_end", "kind", "revision"]
                        rest = [c for c in [STEP, *self._columns[kind]] if c not in pk]
                        query += sql.SQL(" ON CONFLICT ({}) DO UPDATE SET {}").format(
                            sql.SQL(", ").join(map(sql.Identifier, pk)),
                            sql.SQL(", ").join(sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
                                               for c in rest))
                    conn.execute(query, (self.pipeline, step))
                conn.execute(sql.SQL("DELETE FROM {} WHERE {} = %s AND {} = %s").format(staging, p, s),
                             (self.pipeline, step))
            if done:
                log.info("step %d was delivered to PostgreSQL before a restart: skipped", step)
                return False
            if metrics is not None:  # None: a step without a metrics row (reconcile --apply's corrections)
                names = [c for c, _ in METRICS_COLUMNS]
                values = [Jsonb(_jsonable(metrics.get(c))) if t == "jsonb" else metrics.get(c)
                          for c, t in METRICS_COLUMNS]
                conn.execute(sql.SQL("INSERT INTO {} ({}, {}, {}) VALUES (%s, %s, {})").format(
                    self._id(self.cfg.metrics_table), p, s, sql.SQL(", ").join(map(sql.Identifier, names)),
                    sql.SQL(", ").join(sql.Placeholder() * len(names))), (self.pipeline, step, *values))
            conn.execute(sql.SQL("INSERT INTO {} ({}, {}, spark_batch) VALUES (%s, %s, %s)").format(
                self._id(self.cfg.batches_table), p, s), (self.pipeline, step, spark_batch))
        return True


def _jsonable(v: Any) -> Any:
    """Map entries (a list of pairs) → dict; timestamps → ISO strings."""
    if isinstance(v, list) and v and all(isinstance(x, tuple) and len(x) == 2 for x in v):
        return {str(k): None if t is None else str(t) for k, t in v}
    if isinstance(v, list):
        return [str(x) if not isinstance(x, str | int | float) else x for x in v]
    return v
