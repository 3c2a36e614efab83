"""Window state as versioned Parquet buckets plus a manifest per step.

Open (key, window) aggregates are stored under ``<root>/v<step>/_bucket=<end>``,
one bucket per window end. A step (a micro-batch, or the drain) reads only the
buckets it touches or must fire, writes the new versions of those buckets, and
commits a small JSON manifest naming, for each live bucket, the step whose
files hold it -- plus the watermark tracker and the running totals. Freeing a
bucket whose grace has passed is dropping it from the manifest: no I/O.

Exactly-once: the manifest of a step records the Spark batch it came from.
Processing Spark batch ``b`` starts from the newest manifest of a batch
``< b``, so a batch replayed after a crash redoes the same step from the same
state and overwrites the same files.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lowwater.runtime.fs import HadoopFS

_MANIFEST = re.compile(r"^manifest-(\d{12})\.json$")
KEEP_MANIFESTS = 5


@dataclass
class Bucket:
    """A live state bucket: where its rows are and whether its windows fired."""

    version: int
    fired: bool
    rows: int
    bytes: int = 0
    # Processing-time early trigger only: the earliest ``_due`` of its windows (when
    # the longest-waiting window with pending rows started waiting), None if none.
    pending_since_us: int | None = None


@dataclass
class Manifest:
    """Everything that must come back together after a restart."""

    step: int = -1
    spark_batch: int = -1
    buckets: dict[int, Bucket] = field(default_factory=dict)
    tracker: dict | None = None
    totals: dict[str, int] = field(default_factory=dict)
    drained: bool = False
    # Several sources (``[[source]]``): the arrival frontier (core/frontier.py) and the rows
    # delivered but held behind it (spark/held.py: {"version": step, "rows": n}).
    frontier: dict | None = None
    held: dict | None = None

    @property
    def held_rows(self) -> int:
        return int(self.held["rows"]) if self.held else 0

    def due(self, watermark_us: int, now_us: int, every_us: int | None) -> set[int]:
        """Stored buckets a step must read with no new rows: they fire at ``watermark_us``, or their
        longest-waiting window's early trigger (``every <duration>``) is due at ``now_us``."""
        out = {b for b, info in self.buckets.items() if not info.fired and b <= watermark_us}
        if every_us is not None:
            out |= {b for b, info in self.buckets.items() if not info.fired and info.pending_since_us is not None
                    and now_us - info.pending_since_us >= every_us}
        return out

    def to_json(self) -> str:
        data = {
            "step": self.step,
            "spark_batch": self.spark_batch,
            "buckets": {str(k): vars(v) for k, v in sorted(self.buckets.items())},
            "tracker": self.tracker,
            "totals": self.totals,
            "drained": self.drained,
        }
        if self.frontier is not None:
            data["frontier"] = self.frontier
        if self.held is not None:
            data["held"] = self.held
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        d = json.loads(text)
        return cls(
            step=d["step"],
            spark_batch=d["spark_batch"],
            buckets={int(k): Bucket(**v) for k, v in d["buckets"].items()},
            tracker=d.get("tracker"),
            totals=d.get("totals", {}),
            drained=d.get("drained", False),
            frontier=d.get("frontier"),
            held=d.get("held"),
        )

    @property
    def open_windows(self) -> int:
        return sum(b.rows for b in self.buckets.values())

    @property
    def state_bytes(self) -> int:
        return sum(b.bytes for b in self.buckets.values())


class BucketStateStore:
    """Reads and writes window-state buckets under ``root`` (any Hadoop path)."""

    def __init__(self, spark: SparkSession, root: str, schema: StructType) -> None:
        self.spark = spark
        self.root = root.rstrip("/")
        self.schema = schema
        self.fs = HadoopFS(spark)
        self._cache: dict[str, Manifest] = {}

    def _load(self, path: str) -> Manifest:
        if path not in self._cache:
            self._cache[path] = Manifest.from_json(self.fs.read_text(path))
        return self._cache[path]

    def _manifests(self) -> list[tuple[int, str]]:
        out = []
        for name in self.fs.list_names(self.root):
            m = _MANIFEST.match(name)
            if m:
                out.append((int(m.group(1)), f"{self.root}/{name}"))
        return sorted(out)

    def latest(self, before_spark_batch: int | None = None) -> Manifest:
        """The newest committed manifest (of a Spark batch before the given one)."""
        for _, path in reversed(self._manifests()):
            m = self._load(path)
            if before_spark_batch is None or m.spark_batch < before_spark_batch:
                return m
        return Manifest()

    def bucket_path(self, version: int, bucket: int) -> str:
        return f"{self.root}/v{version:012d}/_bucket={bucket}"

    def read(self, manifest: Manifest, buckets: set[int]) -> DataFrame | None:
        """The state rows of the given live buckets (None when there are none)."""
        paths = [self.bucket_path(manifest.buckets[b].version, b) for b in sorted(buckets) if b in manifest.buckets]
        if not paths:
            return None
        return self.spark.read.schema(self.schema).parquet(*paths)

    def version_path(self, step: int) -> str:
        """Where version ``step``'s buckets are (``_bucket=<end>`` under it)."""
        return f"{self.root}/v{step:012d}"

    def write(self, step: int, df: DataFrame) -> dict[int, tuple[int, int]]:
        """Write ``df`` (with a ``_bucket`` column) as version ``step``; rows and bytes per bucket."""
        target = self.version_path(step)
        df.write.mode("overwrite").partitionBy("_bucket").parquet(target)
        return self._bucket_stats(target)

    def column_min(self, step: int, column: str) -> dict[int, int | None]:
        """Per bucket of version ``step``, the min of a long ``column`` (None when all null).

        Read from the Parquet footers' statistics when local (no Spark job).
        """
        target = f"{self.root}/v{step:012d}"
        local = self.fs.local_path(target)
        if local is not None and Path(local).is_dir():
            out: dict[int, int | None] = {}
            for d in Path(local).glob("_bucket=*"):
                lows = []
                for f in d.glob("*.parquet"):
                    md = pq.read_metadata(f)
                    j = md.schema.names.index(column)
                    for g in range(md.num_row_groups):
                        st = md.row_group(g).column(j).statistics
                        if st is not None and st.has_min_max:
                            lows.append(int(st.min))
                out[int(d.name.split("=", 1)[1])] = min(lows) if lows else None
            return out
        rows = self.spark.read.parquet(target).groupBy("_bucket").agg(F.min(column).alias("m")).collect()
        return {int(r["_bucket"]): None if r["m"] is None else int(r["m"]) for r in rows}

    def _bucket_stats(self, target: str) -> dict[int, tuple[int, int]]:
        """Rows and bytes per written bucket, from the Parquet footers (no Spark job when local)."""
        local = self.fs.local_path(target)
        if local is not None and Path(local).is_dir():
            out = {}
            for d in Path(local).glob("_bucket=*"):
                files = list(d.glob("*.parquet"))
                rows = sum(pq.read_metadata(f).num_rows for f in files)
                out[int(d.name.split("=", 1)[1])] = (rows, sum(f.stat().st_size for f in files))
            return out
        counts = self.spark.read.parquet(target).groupBy("_bucket").count().collect()
        sizes = self.fs.sizes_by_child(target)
        return {int(r["_bucket"]): (int(r["count"]), sizes.get(f"_bucket={r['_bucket']}", 0)) for r in counts}

    def commit(self, manifest: Manifest) -> None:
        """Atomically publish the manifest, then forget what no recent manifest needs."""
        path = f"{self.root}/manifest-{manifest.step:012d}.json"
        self.fs.write_text_atomic(path, manifest.to_json())
        self._cache[path] = manifest
        self._collect_garbage()

    def live_versions(self) -> set[int]:
        """Steps of the kept manifests and the held-row versions they name (spark/held.py keeps those)."""
        out: set[int] = set()
        for _, path in self._manifests()[-KEEP_MANIFESTS:]:
            m = self._load(path)
            out.add(m.step)
            if m.held:
                out.add(int(m.held["version"]))
        return out

    def _collect_garbage(self) -> None:
        manifests = self._manifests()
        keep = manifests[-KEEP_MANIFESTS:]
        live: set[int] = set()
        for _, path in keep:
            m = self._load(path)
            live.update(b.version for b in m.buckets.values())
            live.add(m.step)
        oldest_kept = keep[0][0] if keep else 0
        for _, path in manifests[:-KEEP_MANIFESTS]:
            self.fs.delete(path)
            self._cache.pop(path, None)
        for name in self.fs.list_names(self.root):
            if name.startswith("v") and name[1:].isdigit():
                v = int(name[1:])
                if v not in live and v < oldest_kept:
                    self.fs.delete(f"{self.root}/{name}")
