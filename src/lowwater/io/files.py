"""The landing-zone file source: JSON Lines, CSV or Parquet files in a directory.

A batch read (the what-if replay) may also name one file or a glob.

Spark's file stream source reads the files natively (fast, splittable); this
module fixes the schema, asks for the corrupt-record column so a malformed line
becomes a dead letter instead of an exception, and exposes the file path and
block offset so rows can be put in the source's own order (file name order,
then line order) when there is no arrival-time column.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType, _parse_datatype_string

from lowwater.config import ConfigError, PipelineConfig, SourceConfig

CORRUPT = "_corrupt_record"

# Runtime settings that keep parsing independent of the projection (see _load).
PARSE_CONF = {
    "spark.sql.csv.parser.columnPruning.enabled": "false",
    "spark.sql.optimizer.enableJsonExpressionOptimization": "false",
    # A file listed for a micro-batch and deleted before it is read is skipped (Spark logs
    # "Skipped missing file: <path>") instead of failing the run.
    "spark.sql.files.ignoreMissingFiles": "true",
}
_READER = {"jsonl": "json", "csv": "csv", "parquet": "parquet"}


def _reader_options(src: SourceConfig) -> dict[str, str]:
    if src.format == "parquet":
        return {}
    opts = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    if src.format == "csv":
        opts["header"] = "true"
    return opts


def _has_files(path: str) -> bool:
    """A local path names at least one file: a file, a directory holding one, or a glob matching one.

    Hadoop's ``{a,b}`` alternatives are not Python's: such a pattern is left to Spark.
    """
    if glob.has_magic(path):
        return "{" in path or any(Path(p).is_file() for p in glob.glob(path))
    p = Path(path)
    return p.is_file() or (p.is_dir() and any(f.is_file() for f in p.rglob("*")))


def infer_schema(spark: SparkSession, src: SourceConfig) -> StructType:
    """The input schema: ``source.schema`` if given, else inferred from the files present."""
    if src.schema:
        try:
            parsed = _parse_datatype_string(src.schema)
        except Exception as e:  # noqa: BLE001 - Spark's parser raises many types
            msg = f"source.schema: cannot parse {src.schema!r}: {str(e).splitlines()[0]}"
            raise ConfigError(msg) from None
        if not isinstance(parsed, StructType):
            msg = "source.schema: expected a list of `name TYPE` columns"
            raise ConfigError(msg)
        return parsed
    if "://" not in src.path and not _has_files(src.path):
        msg = f"source.path: {src.path} has no files to infer the schema from; add files or set source.schema"
        raise ConfigError(msg)
    reader = spark.read.format(_READER[src.format])
    for k, v in _reader_options(src).items():
        reader = reader.option(k, v)
    if src.format == "csv":
        reader = reader.option("inferSchema", "true")
    schema = reader.load(src.path).schema
    return StructType([f for f in schema.fields if f.name != CORRUPT])


def resolve_schema(spark: SparkSession, cfg: PipelineConfig, state_dir: str | None) -> StructType:
    """Infer once, then keep the schema with the checkpoint so a restart reads the same columns."""
    saved = Path(state_dir, "source_schema.json") if state_dir and "://" not in state_dir else None
    if saved is not None and saved.exists():
        schema = StructType.fromJson(json.loads(saved.read_text()))
    else:
        schema = infer_schema(spark, cfg.source)
    names = set(schema.fieldNames())
    roles = {
        cfg.source.event_time: "source.event_time",
        **({cfg.source.partition: "source.partition"} if cfg.source.partition else {}),
        **({cfg.source.offset: "source.offset"} if cfg.source.offset else {}),
        **({cfg.source.arrival_time: "source.arrival_time"} if cfg.source.arrival_time else {}),
        **{k: "window.key" for k in cfg.window.key},
        **{c: "window.aggregations" for c in cfg.window.value_columns},
    }
    for col in cfg.required_columns:
        if col not in names:
            known = ", ".join(sorted(names))
            msg = f"{roles.get(col, 'config')}: column {col!r} not found in the input (columns: {known})"
            raise ConfigError(msg)
    if saved is not None and not saved.exists():
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text(json.dumps(schema.jsonValue()))
    return schema


def _load(reader, src: SourceConfig, schema: StructType, streaming: bool, path: str | None = None) -> DataFrame:  # noqa: ANN001
    """Rows with the full schema, whatever columns a later projection needs.

    JSON Lines are read as text and parsed with ``from_json``: Spark's JSON
    reader parses only the columns a query asks for, so whether a line is
    "corrupt" would depend on the projection (a bad ``amount`` is invisible to
    a query that reads only the clocks). Parsing the whole line keeps the
    dead-letter verdict the same on the driver and on the executors.
    """
    full = schema
    if src.format != "parquet":
        full = StructType(schema.fields + [StructField(CORRUPT, StringType(), True)])
    if src.format == "jsonl":
        reader = reader.format("text")
        if streaming and src.max_files_per_batch:
            reader = reader.option("maxFilesPerTrigger", src.max_files_per_batch)
        df = reader.load(path or src.path)
        df = df.filter(F.trim(df["value"]) != "")  # a blank line is not a row
        parsed = F.from_json(df["value"], full, _reader_options(src))
        meta = [df["_metadata.file_path"].alias("_file"), df["_metadata.file_block_start"].alias("_block")]
        return df.select(parsed.alias("_j"), *meta).select("_j.*", "_file", "_block")
    reader = reader.format(_READER[src.format]).schema(full)
    for k, v in _reader_options(src).items():
        reader = reader.option(k, v)
    if streaming and src.max_files_per_batch:
        reader = reader.option("maxFilesPerTrigger", src.max_files_per_batch)
    df = reader.load(path or src.path)
    return df.select("*", df["_metadata.file_path"].alias("_file"), df["_metadata.file_block_start"].alias("_block"))


def read_stream(spark: SparkSession, src: SourceConfig, schema: StructType) -> DataFrame:
    """The streaming DataFrame of input rows plus ``_file``/``_block`` ordering columns."""
    return _load(spark.readStream, src, schema, streaming=True)


def read_batch(spark: SparkSession, src: SourceConfig, schema: StructType, path: str | None = None) -> DataFrame:
    """The same rows as :func:`read_stream`, as one bounded batch (the replay; tests feed cuts)."""
    return _load(spark.read, src, schema, streaming=False, path=path)
