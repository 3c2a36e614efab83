"""Reading landing-zone files: JSON Lines, CSV or Parquet.

A batch read (the what-if replay) may also name one file or a glob.

Spark's batch readers read the files natively (fast, splittable; which files
make a micro-batch is the file log's choice, ``io/filelog.py``); this module
fixes the schema, asks for the corrupt-record column so a malformed line
becomes a dead letter instead of an exception, and exposes the file path and
block offset so rows can be put in the source's own order (file name order,
then line order) when there is no arrival-time column.
"""

from __future__ import annotations

import glob
import json
import re
from collections.abc import Collection
from pathlib import Path
from urllib.parse import unquote, urlsplit

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, _parse_datatype_string

from lowwater.config import ConfigError, PipelineConfig, SourceConfig, check_columns
from lowwater.io.checkpoint import start_fresh
from lowwater.io.headers import landing_files, saved_schema  # noqa: F401 - their home before io/headers.py
from lowwater.io.source import source_kind

CORRUPT = "_corrupt_record"

# The path part of a file URI (``file:/x``, ``file:///x`` and ``hdfs://nn/x`` -> ``/x``): Spark spells the same
# file differently in a row's ``_metadata.file_path`` and in ``DataFrame.inputFiles()``.
URI_PATH = r"^[A-Za-z][A-Za-z0-9+.\-]*:(//[^/]*)?(/.*)$"


def uri_path(uri: Column) -> Column:
    """:func:`file_path` as a Spark expression (``+`` stays ``+``, as ``urllib.parse.unquote`` leaves it)."""
    return F.url_decode(F.replace(F.regexp_extract(uri, URI_PATH, 2), F.lit("+"), F.lit("%2B")))


def file_path(uri: str) -> str:
    """The path of a file URI as Spark lists it (``file:///x%20y`` -> ``/x y``)."""
    return unquote(urlsplit(uri).path)

# Runtime settings that keep parsing independent of the projection (see _load).
PARSE_CONF = {
    "spark.sql.csv.parser.columnPruning.enabled": "false",
    "spark.sql.optimizer.enableJsonExpressionOptimization": "false",
    # A file listed for a micro-batch and deleted before it is read is skipped (Spark logs
    # "Skipped missing file: <path>") instead of failing the run.
    "spark.sql.files.ignoreMissingFiles": "true",
}
_READER = {"jsonl": "json", "csv": "csv", "parquet": "parquet", "delta": "parquet"}  # delta: its data files


def _reader_options(src: SourceConfig) -> dict[str, str]:
    if src.format in ("parquet", "delta"):
        return {}
    opts = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    if src.zone != "UTC":  # text read as a timestamp column without an offset is a wall-clock time there
        opts["timeZone"] = src.zone
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


def infer_schema(spark: SparkSession, src: SourceConfig, prefer: Collection[str] = ()) -> StructType:
    """The input schema: ``source.schema`` if given, else inferred from the files present.

    ``prefer``: the columns the configuration names, which keep their spelling
    where the input has names that differ only in case (:func:`keep_one_spelling`).
    """
    fixed = source_kind(src).fixed_schema(src)  # a kind's own (Kafka: the value's fields, the record's columns)
    if fixed is not None:
        return fixed
    if src.schema:
        try:
            parsed = _parse_datatype_string(src.schema)
        except Exception as e:  # noqa: BLE001 - Spark's parser raises many types
            msg = f"{src.key('schema')}: cannot parse {src.schema!r}: {str(e).splitlines()[0]}"
            raise ConfigError(msg) from None
        if not isinstance(parsed, StructType):
            msg = f"{src.key('schema')}: expected a list of `name TYPE` columns"
            raise ConfigError(msg)
        return parsed
    if src.format not in _READER:  # a registered source kind (io/source.py): no files of ours to infer from
        msg = f"{src.key('schema')}: required with format = {src.format!r} (lowwater infers columns from files only)"
        raise ConfigError(msg)
    if "://" not in src.path:
        if not glob.has_magic(src.path) and not Path(src.path).exists():
            msg = f"{src.key('path')}: {src.path} does not exist"
            raise ConfigError(msg)
        if not _has_files(src.path):
            msg = (f"{src.key('path')}: {src.path} has no files to infer the schema from; add files or set "
                   f"{src.key('schema')}")
            raise ConfigError(msg)
    reader = spark.read.format(_READER[src.format])
    for k, v in _reader_options(src).items():
        reader = reader.option(k, v)
    if src.format == "csv":
        reader = reader.option("inferSchema", "true")
    try:
        try:
            schema = reader.load(src.path).schema
        except Exception as e:
            if src.format != "jsonl" or _CLASH not in str(e):
                raise
            schema = _case_sensitive(spark, lambda: reader.load(src.path).schema)
            schema = keep_one_spelling(schema, prefer)
    except Exception as e:
        line = unreadable_parquet(e) or _clash_line(e)
        if line is None:
            raise
        raise ConfigError(f"{src.key('path')}: {line}") from None
    return StructType([f for f in schema.fields if f.name != CORRUPT])


# -- column names that differ only in case ---------------------------------------------------
# Spark's column names ignore case (spark.sql.caseSensitive is false), so `Origin` next to `origin` is one
# name twice: schema inference fails with COLUMN_ALREADY_EXISTS. JSON Lines keep one spelling per name (the
# configuration's, else the lower-case one, else the first) and note the others on it; a line that has
# another spelling is a dead letter with that reason (``_load``, ``io/parse._malformed_reason``). Parquet
# and CSV columns are the file's own: one configuration line (CSV headers Spark renames itself).
_CLASH = "COLUMN_ALREADY_EXISTS"
CASE_VARIANTS = "lowwater.case_variants"  # field metadata: the other spellings of this column seen in the input


def _case_sensitive(spark: SparkSession, infer):  # noqa: ANN001, ANN202 - a thunk returning a schema
    key = "spark.sql.caseSensitive"
    before = spark.conf.get(key)
    spark.conf.set(key, "true")
    try:
        return infer()
    finally:
        spark.conf.set(key, before)


def keep_one_spelling(schema: StructType, prefer: Collection[str] = ()) -> StructType:
    """One field per case-insensitive name; the other spellings go in its metadata (:data:`CASE_VARIANTS`)."""
    groups: dict[str, list[StructField]] = {}
    for f in schema.fields:
        groups.setdefault(f.name.lower(), []).append(f)
    out = []
    for f in schema.fields:
        group = groups[f.name.lower()]
        if len(group) == 1:
            out.append(f)
            continue
        names = [g.name for g in group]
        keep = next((n for n in names if n in prefer), None) or next((n for n in names if n == n.lower()), names[0])
        if f.name != keep:
            continue
        others = [n for n in names if n != keep]
        out.append(StructField(f.name, f.dataType, f.nullable, {**f.metadata, CASE_VARIANTS: others}))
    return StructType(out)


def case_variants(schema: StructType) -> dict[str, str]:
    """Each other spelling of a column seen in the input -> the column's name."""
    return {v: f.name for f in schema.fields for v in f.metadata.get(CASE_VARIANTS, [])}


def _clash_line(error: BaseException) -> str | None:
    found = re.search(r"\[COLUMN_ALREADY_EXISTS\] The column `([^`]+)` already exists", str(error))
    if found is None:
        return None
    return (f"the input has two columns named {found.group(1)!r} in different cases; Spark's column names "
            "ignore case: rename one in the files")


_NANOS = ('a timestamp in nanoseconds? Spark reads micro- and milliseconds: write microseconds, e.g. pandas '
          '`to_parquet(..., coerce_timestamps="us")` or pyarrow `write_table(..., coerce_timestamps="us")`')
_ILLEGAL = re.compile(r"Illegal Parquet type: (.+?)\. SQLSTATE")
_DUPLICATE = re.compile(r'Found duplicate field\(s\) "(.+?)": \[(.+?)\] in case-insensitive mode')
_READING = re.compile(r"Encountered error while reading file (\S+?)\. SQLSTATE")
_MISMATCH = re.compile(r"reading file (\S+?)\. Data type mismatches when reading Parquet column \[(.+?)\]\. "
                       r"Expected Spark type (\S+?), actual Parquet type (\S+?)\.")


def unreadable_parquet(error: BaseException) -> str | None:
    """A Parquet column Spark cannot read (a nanosecond timestamp, a type other than the schema's, names that
    differ only in case), in one line.

    pandas writes timestamps in nanoseconds by default, which Spark refuses
    (``PARQUET_TYPE_ILLEGAL`` when inferring the schema, a type mismatch
    naming the file and column when reading with a given schema), deep in a
    Java stack. None: the error is something else.
    """
    text = " ".join(str(error).split())
    found = _ILLEGAL.search(text)
    if found:
        kind = found.group(1)
        hint = f" ({_NANOS})" if "NANOS" in kind else ""
        return f"a Parquet file has a column of type {kind}, which Spark cannot read{hint}"
    found = _DUPLICATE.search(text)
    if found:  # a later file with names that differ only in case (the first one is refused at inference)
        where = _READING.search(text)
        return (f"{where.group(1) + ': ' if where else ''}Parquet columns {found.group(2)} differ only in case, "
                "which Spark's column names ignore: rename one in the file")
    found = _MISMATCH.search(text)
    if found:
        path, column, wanted, stored = found.groups()
        hint = f" ({_NANOS})" if wanted.startswith("timestamp") and stored == "INT64" else ""
        return f"{path}: column {column} is stored as Parquet {stored}, which Spark cannot read as {wanted}{hint}"
    return None


def resolve_schema(spark: SparkSession, cfg: PipelineConfig, state_dir: str | None) -> StructType:
    """Infer once, then keep the schema with the checkpoint so a restart reads the same columns."""
    return resolve_source_schema(spark, cfg, cfg.source, state_dir)


def resolve_source_schema(
    spark: SparkSession, cfg: PipelineConfig, src: SourceConfig, state_dir: str | None
) -> StructType:
    """One source's schema: inferred once, then kept under ``state_dir`` so a restart reads the same columns."""
    saved = saved_schema(state_dir) if state_dir else None
    if saved is not None and saved.exists():
        schema = StructType.fromJson(json.loads(saved.read_text()))
        if src.schema:  # an explicit schema must match, never silently give way to the saved one
            _check_same(infer_schema(spark, src), schema, str(saved), cfg)
    else:
        schema = infer_schema(spark, src, prefer=cfg.columns_for(src))
    check_columns(cfg, {src.name: {f.name: f.dataType.simpleString() for f in schema.fields}})
    if saved is not None and not saved.exists():
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text(json.dumps(schema.jsonValue()))
    return schema


def _check_same(explicit: StructType, saved: StructType, where: str, cfg: PipelineConfig) -> None:
    """One line naming the first column where ``source.schema`` and the saved schema differ."""
    old = {f.name: f.dataType.simpleString() for f in saved.fields}
    new = {f.name: f.dataType.simpleString() for f in explicit.fields}
    if list(old.items()) == list(new.items()):
        return
    msg = (f"source.schema: differs from the schema this checkpoint was started with ({where}): "
           f"{_first_difference(old, new)}; the checkpoint keeps its schema, so {start_fresh(cfg)}")
    raise ConfigError(msg)


def _first_difference(old: dict[str, str], new: dict[str, str]) -> str:
    for name, typ in new.items():
        if name not in old:
            return f"column {name!r} is not in it"
        if old[name] != typ:
            return f"column {name!r} is {old[name]} there and {typ} here"
    missing = [n for n in old if n not in new]
    return f"its column {missing[0]!r} is missing here" if missing else "the column order differs"


def _load(reader, src: SourceConfig, schema: StructType, path: str | list[str] | None = None,  # noqa: ANN001
          files: bool = True) -> DataFrame:
    """Rows with the full schema, whatever columns a later projection needs.

    ``files``: ``_file``/``_block`` from the file's metadata; else typed nulls
    (a reader that asks for no metadata column reads the plain columns only).

    JSON Lines are read as text and parsed with ``from_json``: Spark's JSON
    reader parses only the columns a query asks for, so whether a line is
    "corrupt" would depend on the projection (a bad ``amount`` is invisible to
    a query that reads only the clocks). Parsing the whole line keeps the
    dead-letter verdict the same on the driver and on the executors.
    """
    full = schema
    if src.format not in ("parquet", "delta"):
        full = StructType(schema.fields + [StructField(CORRUPT, StringType(), True)])
    if isinstance(path, list):  # files of the landing zone: its `k=v` directories stay partition columns
        reader = reader.option("basePath", src.path)
    if src.format == "jsonl":
        reader = reader.format("text")
        df = reader.load(src.path if path is None else path)
        df = df.filter(F.trim(df["value"]) != "")  # a blank line is not a row
        variants = case_variants(schema)
        if variants:
            return _load_variants(df, full, variants, src, files)
        parsed = F.from_json(df["value"], full, _reader_options(src))
        return df.select(parsed.alias("_j"), *_meta(df, files)).select("_j.*", "_file", "_block")
    reader = reader.format(_READER[src.format]).schema(full)
    for k, v in _reader_options(src).items():
        reader = reader.option(k, v)
    df = reader.load(src.path if path is None else path)
    return df.select("*", *_meta(df, files))


def _load_variants(df: DataFrame, full: StructType, variants: dict[str, str], src: SourceConfig,
                   files: bool) -> DataFrame:
    """JSON Lines whose keys include other spellings of a column: a line with one is a dead letter.

    Each spelling is parsed as a field of its own (``from_json`` matches keys
    exactly), the struct is renamed by position (so no two names differ only
    in case), and a line with any other spelling keeps its text in the
    corrupt-record column, noted with the spellings for its reason.
    """
    others = list(variants)
    wide = StructType([*full.fields, *[StructField(v, StringType(), True) for v in others]])
    plain = StructType([*full.fields, *[StructField(f"_case{i}", StringType(), True) for i in range(len(others))]])
    parsed = F.from_json(df["value"], wide, _reader_options(src)).cast(plain)
    j = df.select(parsed.alias("_j"), df["value"], *_meta(df, files))
    clash = F.lit(False)
    for i in range(len(others)):
        clash = clash | F.col(f"_j._case{i}").isNotNull()
    note = {CASE_VARIANTS: json.dumps(variants)}
    corrupt = F.when(clash, F.col("value")).otherwise(F.col(f"_j.{CORRUPT}")).alias(CORRUPT, metadata=note)
    cols = [F.col(f"_j.`{f.name}`").alias(f.name) for f in full.fields if f.name != CORRUPT]
    return j.select(*cols, corrupt, "_file", "_block")


def _meta(df: DataFrame, files: bool) -> list:
    if not files:
        return [F.lit(None).cast(StringType()).alias("_file"), F.lit(None).cast(LongType()).alias("_block")]
    return [df["_metadata.file_path"].alias("_file"), df["_metadata.file_block_start"].alias("_block")]


def read_batch(
    spark: SparkSession, src: SourceConfig, schema: StructType, path: str | list[str] | None = None,
    files: bool = True,
) -> DataFrame:
    """Input rows plus ``_file``/``_block`` ordering columns: the whole landing zone, a path or a list of files.

    ``files=False``: those two are nulls, for a job that needs neither (reading
    the metadata makes Parquet produce row indexes too: slower).
    """
    return _load(spark.read, src, schema, path=path, files=files)


def empty_batch(spark: SparkSession, src: SourceConfig, schema: StructType) -> DataFrame:
    """No rows, with the columns :func:`read_batch` gives (a micro-batch whose files all vanished)."""
    fields = list(schema.fields)
    if src.format not in ("parquet", "delta"):
        fields.append(StructField(CORRUPT, StringType(), True))
    fields += [StructField("_file", StringType(), True), StructField("_block", LongType(), True)]
    return spark.createDataFrame([], StructType(fields))
