"""Several outputs of a step in ONE Spark job: the tasks write their own Parquet files (ADR 0046).

Spark's writer writes one frame with one schema a job, so a step writing
results, late rows, dead letters, held rows and state would be a job each (two
or three with AQE). Here each output's frame becomes one struct column of a
single union (``_lw_kind`` says which); one ``mapInArrow`` pass writes each
task's rows of each output with pyarrow **under their final names** and returns
only (output, partition, file, rows, bytes, a column's minimum). Before the job
the driver deletes each target (an overwrite, as Spark's); after it, it deletes
every file under a target that no task reported (a failed or duplicate task
attempt's) and writes ``_SUCCESS``. A crash anywhere before the manifest
commits replays the step, which rewrites the same targets.

Same writer on every path (the local file system and ``s3a://``, through
pyarrow's own S3 client configured from the session's ``fs.s3a.*``
settings): sizes taken from the written files are the same number wherever
the files are. The files read as Spark's own: Spark's schema in the footer,
UTC-adjusted microsecond timestamps, every column optional, snappy; an output
with no row gets one empty file with its columns (what Spark writes for an
empty frame). Other schemes: :func:`writable` says no, the caller keeps
Spark's writers.

Run it without AQE (``runtime/jobs.without_aqe`` around the frames' planning
and the write): with AQE each exchange is a job of its own. ``tasks`` writing
tasks do what AQE's coalescing did: a small step writes one file per output.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark import TaskContext
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from lowwater.io.outputs import nullable
from lowwater.runtime.columns import select_built
from lowwater.runtime.fs import HadoopFS

SPARK_ROW_METADATA = b"org.apache.spark.sql.parquet.row.metadata"
SPARK_VERSION = b"org.apache.spark.version"
_KIND, _PART = "_lw_kind", "_lw_part"
_FLUSH_ROWS = 131_072  # rows of one (output, partition) buffered before a row group is written
_FILES = T.StructType([
    T.StructField("kind", T.LongType()), T.StructField("part", T.LongType()), T.StructField("file", T.StringType()),
    T.StructField("rows", T.LongType()), T.StructField("bytes", T.LongType()), T.StructField("low", T.LongType()),
])
_WRITE = {"compression": "snappy", "store_schema": False, "coerce_timestamps": "us", "store_decimal_as_integer": True}


@dataclass(frozen=True)
class Output:
    """One output: its frame, the directory its files replace, and optionally a partition and a reported minimum.

    ``partition``: a long column; each value's rows go under ``<target>/<partition>=<value>/`` and the
    column is not in the files (Spark's ``partitionBy``). ``low``: a long column whose minimum per
    file comes back (the state's ``_due``).
    """

    frame: DataFrame
    target: str
    partition: str | None = None
    low: str | None = None


@dataclass(frozen=True)
class Written:
    """A file the write left in place: its partition value, path, rows, bytes and ``low`` minimum."""

    part: int | None
    path: str
    rows: int
    bytes: int
    low: int | None


@dataclass(frozen=True)
class _Store:
    """Where files go, as pyarrow reaches it from a task (picklable): the local disk or one S3 endpoint."""

    s3: tuple[tuple[str, object], ...] | None = None  # pyarrow S3FileSystem's keyword arguments

    def filesystem(self) -> pafs.FileSystem:
        return pafs.LocalFileSystem() if self.s3 is None else pafs.S3FileSystem(**dict(self.s3))


def writable(fs: HadoopFS, *paths: str) -> bool:
    """Can :func:`write_outputs` write under every one of ``paths`` (the local file system or ``s3a://``)?"""
    return all(fs.local_path(p) is not None or urlsplit(p).scheme == "s3a" for p in paths)


def _s3_options(fs: HadoopFS, bucket: str) -> tuple[tuple[str, object], ...]:
    """pyarrow's S3 client as the session's S3A is configured (a bucket's own ``fs.s3a.bucket.<b>.*`` first)."""

    def get(key: str) -> str | None:
        return fs.setting(f"fs.s3a.bucket.{bucket}.{key}") or fs.setting(f"fs.s3a.{key}")

    out: dict[str, object] = {}
    endpoint = get("endpoint")
    ssl = (get("connection.ssl.enabled") or "true").lower() != "false"
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"{'https' if ssl else 'http'}://{endpoint}")
        out["endpoint_override"] = parts.netloc
        out["scheme"] = parts.scheme
    region = get("endpoint.region") or get("region")
    if region:
        out["region"] = region
    key, secret = get("access.key"), get("secret.key")
    if key and secret:
        out["access_key"], out["secret_key"] = key, secret
        token = get("session.token")
        if token:
            out["session_token"] = token
    if (get("path.style.access") or "false").lower() != "true" and not endpoint:
        out["force_virtual_addressing"] = True
    return tuple(sorted(out.items()))


def _where(fs: HadoopFS, path: str) -> tuple[_Store, str]:
    """The store and pyarrow's path of ``path`` (``bucket/key`` on S3)."""
    local = fs.local_path(path)
    if local is not None:
        return _Store(), local
    parts = urlsplit(path)
    return _Store(_s3_options(fs, parts.netloc)), f"{parts.netloc}{parts.path}".rstrip("/")


def _schema(data: T.StructType, meta: bytes, spark_version: bytes) -> pa.Schema:
    arrow = to_arrow_schema(data, timezone="UTC")
    return pa.schema([pa.field(f.name, f.type, True) for f in arrow],
                     metadata={SPARK_ROW_METADATA: meta, SPARK_VERSION: spark_version})


def _write_tasks(  # noqa: ANN202
    store: _Store, roots: list[str], parts: list[str | None], lows: list[str | None], metas: list[dict[bytes, bytes]],
):
    """The ``mapInArrow`` function: each task's rows of each output into one file per (output, partition)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fsys = store.filesystem()
        task = TaskContext.get()
        prefix = f"part-{task.partitionId() if task is not None else 0:05d}-{uuid.uuid4().hex}"
        open_: dict[tuple[int, int | None], list] = {}  # (output, part) -> [writer, sink, path, rows, low, buffer]

        def flush(entry: list) -> None:
            if entry[5]:
                entry[0].write_table(pa.Table.from_batches(entry[5]))
                entry[5] = []

        for b in batches:
            if not b.num_rows:
                continue
            kinds = b.column(_KIND)
            for i in pc.unique(kinds).to_pylist():
                sub = b.filter(pc.equal(kinds, i))
                values = sub.column(f"_lw_{i}")
                fields = [pa.field(f.name, f.type, True) for f in values.type]
                data = pa.RecordBatch.from_arrays(values.flatten(), schema=pa.schema(fields, metadata=metas[i]))
                groups: list[tuple[int | None, pa.RecordBatch]] = [(None, data)]
                if parts[i] is not None:
                    col = sub.column(_PART)
                    groups = [(int(v), data.filter(pc.equal(col, v))) for v in pc.unique(col).to_pylist()]
                for part, rows in groups:
                    entry = open_.get((i, part))
                    if entry is None:
                        d = roots[i] if part is None else f"{roots[i]}/{parts[i]}={part}"
                        path = f"{d}/{prefix}.c{i:03d}.snappy.parquet"
                        if store.s3 is None:
                            fsys.create_dir(d, recursive=True)
                        sink = fsys.open_output_stream(path)
                        entry = open_[(i, part)] = [pq.ParquetWriter(sink, data.schema, **_WRITE), sink, path, 0,
                                                    None, []]
                    entry[5].append(rows.cast(entry[0].schema) if rows.schema != entry[0].schema else rows)
                    entry[3] += rows.num_rows
                    if sum(x.num_rows for x in entry[5]) >= _FLUSH_ROWS:
                        flush(entry)
                    if lows[i] is not None:
                        low = pc.min(rows.column(lows[i])).as_py()
                        if low is not None:
                            entry[4] = low if entry[4] is None else min(entry[4], low)
        out: dict[str, list] = {k: [] for k in _FILES.fieldNames()}
        for (i, part), entry in open_.items():
            flush(entry)
            writer, sink, path, n, low, _ = entry
            writer.close()
            size = sink.tell()
            sink.close()
            for k, v in zip(_FILES.fieldNames(), (i, part, path, n, size, low), strict=True):
                out[k].append(v)
        if open_:
            yield pa.RecordBatch.from_pydict(out, schema=to_arrow_schema(_FILES))

    return run


def _union(outputs: list[Output]) -> tuple[DataFrame, list[T.StructType]]:
    """Every output's rows as one frame: ``_lw_kind``, ``_lw_part`` and one struct column per output."""
    frames, schemas = [], []
    for o in outputs:
        df = nullable(o.frame)
        schemas.append(T.StructType([f for f in df.schema.fields if f.name != o.partition]))
        frames.append(df)
    union = None
    shapes = tuple(s.json() for s in schemas)
    for i, (o, df) in enumerate(zip(outputs, frames, strict=True)):

        def build(i: int = i, o: Output = o) -> list[Column]:
            cols = [F.lit(i).cast("long").alias(_KIND),
                    (F.col(o.partition) if o.partition else F.lit(None)).cast("long").alias(_PART)]
            for j, sch in enumerate(schemas):
                if j == i:
                    cols.append(F.struct(*[F.col(f"`{f.name}`") for f in sch.fields]).alias(f"_lw_{j}"))
                else:
                    cols.append(F.lit(None).cast(sch).alias(f"_lw_{j}"))
            return cols

        # The columns depend on the outputs' schemas only: built once, one py4j call a step after that.
        part = select_built(df, ("fused_union", i, o.partition, shapes), build)
        union = part if union is None else union.unionByName(part)
    assert union is not None
    return union, schemas


def _delete_unreported(fs: HadoopFS, store: _Store, root: str, target: str, keep: set[str]) -> None:
    """Delete every file under ``target`` (pyarrow path ``root``) that no task reported: a failed attempt's."""
    fsys = store.filesystem()
    try:
        infos = fsys.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    except FileNotFoundError:
        return
    for info in infos:
        if info.type == pafs.FileType.File and info.path not in keep and not info.base_name.startswith("_"):
            fsys.delete_file(info.path)


def writing_tasks(spark: SparkSession, rows: int, rows_a_task: int) -> int:
    """How many tasks write ``rows``: one per ``rows_a_task``, at least one, at most the shuffle partitions."""
    most = int(spark.conf.get("spark.sql.shuffle.partitions") or 1)
    return max(1, min(most, -(-rows // rows_a_task)))


def write_outputs(fs: HadoopFS, outputs: list[Output], tasks: int) -> list[list[Written]]:
    """Write every output in one Spark job of ``tasks`` writing tasks; per output, the files now in place.

    Every target must be :func:`writable`. Call it with AQE off (see the module's docstring).
    """
    if not outputs:
        return []
    union, schemas = _union(outputs)
    spark = union.sparkSession
    version = spark.version.encode()
    metas = [s.json().encode() for s in schemas]
    where = [_where(fs, o.target) for o in outputs]
    stores = {w[0] for w in where}
    if len(stores) != 1:  # one client a task: every target on one store (the caller falls back otherwise)
        msg = "a fused write's outputs must be on one file system"
        raise ValueError(msg)
    (store,) = stores
    for o in outputs:  # an overwrite: what an earlier attempt of the step left goes first
        fs.delete(o.target)
    footers = [{SPARK_ROW_METADATA: m, SPARK_VERSION: version} for m in metas]
    fn = _write_tasks(store, [r for _, r in where], [o.partition for o in outputs], [o.low for o in outputs],
                      footers)
    files = union.coalesce(max(1, tasks)).mapInArrow(fn, _FILES).collect()
    fsys = store.filesystem()
    out: list[list[Written]] = [[] for _ in outputs]
    for i, (o, (_, root), sch, meta) in enumerate(zip(outputs, where, schemas, metas, strict=True)):
        mine = [r for r in files if int(r["kind"]) == i]
        _delete_unreported(fs, store, root, o.target, {r["file"] for r in mine})
        if not mine and o.partition is None:  # an empty frame: its columns, as Spark writes one
            if store.s3 is None:
                fsys.create_dir(root, recursive=True)
            pq.write_table(_schema(sch, meta, version).empty_table(), f"{root}/part-00000-{uuid.uuid4().hex}"
                           ".c000.snappy.parquet", filesystem=fsys, **_WRITE)
        if store.s3 is None:
            fsys.create_dir(root, recursive=True)
        with fsys.open_output_stream(f"{root}/_SUCCESS"):
            pass
        for r in mine:
            path = r["file"] if store.s3 is None else f"s3a://{r['file']}"
            out[i].append(Written(None if r["part"] is None else int(r["part"]), path, int(r["rows"]),
                                  int(r["bytes"]), None if r["low"] is None else int(r["low"])))
    return out
