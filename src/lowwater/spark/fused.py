"""Several outputs of a step in one Spark job: the tasks write their own Parquet files (ADR 0041).

Spark's writer writes one frame with one schema a job, so a step writing
results, late rows and state would be one job each. Here every output's frame
becomes one struct column of a single union (``_lw_kind`` says which, ``_lw_bucket``
the state bucket), and one ``mapInArrow`` pass writes each task's rows of each
output with pyarrow into a hidden staging directory beside the output, returning
only (kind, bucket, file, rows, bytes, a column's minimum). The driver then
moves exactly the files it was told of -- never a failed task attempt's -- into
place, replacing what an earlier attempt of the step left, before the manifest
commits: a crash anywhere before the commit replays the step, as with Spark's
``overwrite``.

The files read as Spark's own do: Spark's schema in the footer
(``org.apache.spark.sql.parquet.row.metadata``), UTC-adjusted microsecond
timestamps, every column optional, snappy; plus one ``_SUCCESS`` marker, and an
empty schema file when an output got no row (as Spark writes for an empty frame).
Local paths only (a rename is a metadata change there; object stores have none,
ADR 0029): elsewhere the operator keeps Spark's writes.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from lowwater.io.outputs import nullable
from lowwater.runtime.fs import HadoopFS
from lowwater.runtime.jobs import without_aqe

SPARK_ROW_METADATA = b"org.apache.spark.sql.parquet.row.metadata"
_KIND, _BUCKET = "_lw_kind", "_lw_bucket"
_FILES = T.StructType([
    T.StructField("kind", T.LongType()), T.StructField("bucket", T.LongType()), T.StructField("file", T.StringType()),
    T.StructField("rows", T.LongType()), T.StructField("bytes", T.LongType()), T.StructField("low", T.LongType()),
])


@dataclass(frozen=True)
class Output:
    """One output of the fused write: its frame, its directory, its bucket column and the column whose min is kept."""

    frame: DataFrame
    target: str  # the directory the files end in (replaced); with ``bucket``: its ``<bucket>=<b>`` subdirectories
    bucket: str | None = None
    low: str | None = None  # a long column whose minimum per file comes back (the state's ``_due``)


@dataclass(frozen=True)
class Written:
    """A file the fused write moved into place."""

    bucket: int | None
    path: str
    rows: int
    bytes: int
    low: int | None


def local_dirs(fs: HadoopFS, *paths: str) -> bool:
    """Can the fused write serve these outputs (every path on the local file system)?"""
    return all(fs.local_path(p) is not None for p in paths)


def _staging(target: str) -> Path:
    t = Path(target)
    return t.parent / f".{t.name}.staging"


def _write_tasks(staging: list[str], buckets: list[str | None], lows: list[str | None], metas: list[bytes]):  # noqa: ANN202
    """The ``mapInArrow`` function: each task's rows of each output into its own files (one per bucket)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        open_: dict[tuple[int, int | None], list] = {}  # (output, bucket) -> [writer, path, rows, low]
        for b in batches:
            if not b.num_rows:
                continue
            kinds = b.column(_KIND)
            for i in pc.unique(kinds).to_pylist():
                sub = b.filter(pc.equal(kinds, i))
                values = sub.column(f"_lw_{i}")
                fields = [pa.field(f.name, f.type, True) for f in values.type]
                schema = pa.schema(fields, metadata={SPARK_ROW_METADATA: metas[i]})
                data = pa.RecordBatch.from_arrays(values.flatten(), schema=schema)
                groups: list[tuple[int | None, pa.RecordBatch]] = [(None, data)]
                if buckets[i] is not None:
                    col = sub.column(_BUCKET)
                    groups = [(int(v), data.filter(pc.equal(col, v))) for v in pc.unique(col).to_pylist()]
                for bucket, rows in groups:
                    entry = open_.get((i, bucket))
                    if entry is None:
                        d = Path(staging[i]) / (f"{buckets[i]}={bucket}" if bucket is not None else "")
                        d.mkdir(parents=True, exist_ok=True)
                        path = str(d / f"part-{uuid.uuid4().hex}.snappy.parquet")
                        writer = pq.ParquetWriter(path, schema, compression="snappy", store_schema=False,
                                                  coerce_timestamps="us", store_decimal_as_integer=True)
                        entry = open_[(i, bucket)] = [writer, path, 0, None]
                    entry[0].write_batch(rows)
                    entry[2] += rows.num_rows
                    if lows[i] is not None:
                        low = pc.min(rows.column(lows[i])).as_py()
                        if low is not None:
                            entry[3] = low if entry[3] is None else min(entry[3], low)
        out = {k: [] for k in _FILES.fieldNames()}
        for (i, bucket), (writer, path, n, low) in open_.items():
            writer.close()
            for k, v in zip(_FILES.fieldNames(), (i, bucket, path, n, os.path.getsize(path), low), strict=True):
                out[k].append(v)
        if open_:
            yield pa.RecordBatch.from_pydict(out, schema=to_arrow_schema(_FILES))

    return run


def write_outputs(fs: HadoopFS, outputs: list[Output], tasks: int) -> list[list[Written]]:
    """Write every output in one Spark job of ``tasks`` writing tasks; per output, the files now in its directory.

    Run without AQE (one job, not one more per exchange), so ``tasks`` does what its coalescing did:
    a small step writes one file per output, not one per shuffle partition.
    """
    frames, metas, schemas = [], [], []
    for o in outputs:
        df = nullable(o.frame)
        data = [f for f in df.schema.fields if f.name != o.bucket]
        schemas.append(T.StructType(data))
        metas.append(T.StructType(data).json().encode())
        frames.append((df, data))
    union = None
    for i, (df, data) in enumerate(frames):
        cols = [F.lit(i).cast("long").alias(_KIND),
                (F.col(outputs[i].bucket) if outputs[i].bucket else F.lit(None)).cast("long").alias(_BUCKET)]
        for j, sch in enumerate(schemas):
            if j == i:
                cols.append(F.struct(*[F.col(f"`{f.name}`") for f in data]).alias(f"_lw_{j}"))
            else:
                cols.append(F.lit(None).cast(sch).alias(f"_lw_{j}"))
        part = df.select(*cols)
        union = part if union is None else union.unionByName(part)
    assert union is not None
    staging = [_staging(fs.local_path(o.target) or o.target) for o in outputs]
    for s in staging:  # what an earlier attempt of the step left
        shutil.rmtree(s, ignore_errors=True)
    fn = _write_tasks([str(s) for s in staging], [o.bucket for o in outputs], [o.low for o in outputs], metas)
    with without_aqe(union.sparkSession):
        files = union.coalesce(tasks).mapInArrow(fn, _FILES).collect()
    out: list[list[Written]] = [[] for _ in outputs]
    for i, (o, s, sch, meta, got) in enumerate(zip(outputs, staging, schemas, metas, out, strict=True)):
        target = Path(fs.local_path(o.target) or o.target)
        mine = [r for r in files if int(r["kind"]) == i]
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for r in mine:
            src = Path(r["file"])
            d = target / src.parent.relative_to(s) if o.bucket is not None else target
            d.mkdir(parents=True, exist_ok=True)
            os.replace(src, d / src.name)
            got.append(Written(None if r["bucket"] is None else int(r["bucket"]), str(d / src.name), int(r["rows"]),
                               int(r["bytes"]), None if r["low"] is None else int(r["low"])))
        if not mine and o.bucket is None:  # an empty frame: its columns, as Spark writes one
            arrow = to_arrow_schema(sch, timezone="UTC")
            arrow = pa.schema([pa.field(f.name, f.type, True) for f in arrow], metadata={SPARK_ROW_METADATA: meta})
            pq.write_table(arrow.empty_table(), target / f"part-{uuid.uuid4().hex}.snappy.parquet",
                           store_schema=False, coerce_timestamps="us", store_decimal_as_integer=True)
        (target / "_SUCCESS").touch()
        shutil.rmtree(s, ignore_errors=True)
    return out
