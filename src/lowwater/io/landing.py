"""The landing directory as a Structured Streaming source, in file name order.

The query reads a Python streaming data source (``lowwater_files``, PySpark's
DataSource API): its offset is a position in the file log
(``io/filelog.py``) and a micro-batch's rows are the positions ``[start,
end)``. Spark checkpoints these offsets like any source's, so a batch
replayed after a crash gets the same positions, hence the same files;
``max_files_per_batch`` is the source's read limit (``ReadMaxFiles``, which
``availableNow`` honours too). In ``foreachBatch`` the engine collects the
positions (a handful of rows), the log names the files, and Spark's batch
reader reads them natively (``read_batch``: splittable, corrupt records as
dead letters, ``_file``/``_block`` for the source order).

Why positions rather than file names: Spark runs the stream reader in a
Python worker on the driver host with no JVM gateway, so it could not list an
``hdfs://`` or ``s3a://`` directory. The driver lists through Hadoop's
FileSystem (``HadoopFS``), appends to the log, and tells the reader how long
the log is through a small file in a local temporary directory (both
processes are on the driver host).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from lowwater.config import ConfigError, PipelineConfig, SourceConfig
from lowwater.io.checkpoint import start_fresh
from lowwater.io.delta_log import order_key, split_name
from lowwater.io.filelog import DeltaFileLog, FileLog
from lowwater.io.files import empty_batch, read_batch
from lowwater.io.source import Admitted
from lowwater.runtime.fs import HadoopFS

log = logging.getLogger("lowwater")

FORMAT = "lowwater_files"


def _logged_files(counter: str) -> int:
    try:
        with open(counter) as f:
            return int(json.load(f)["files"])
    except FileNotFoundError:
        return 0


class LandedFiles(DataSource):
    """``spark.readStream.format("lowwater_files")``: positions of the file log, in order.

    Options: ``counter`` (the local file holding the log's length) and
    ``max_files`` (files per micro-batch, empty for no limit).
    """

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return "position LONG"

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: ARG002, N802 - Spark's name
        return _LogReader(self.options["counter"], int(self.options.get("max_files") or 0))


class _LogReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{"position": n}``: the first ``n`` files of the log are admitted."""

    def __init__(self, counter: str, max_files: int) -> None:
        self.counter = counter
        self.max_files = max_files
        self.target: int | None = None  # availableNow: the log's length when the query started

    def initialOffset(self) -> dict:  # noqa: N802
        return {"position": 0}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        return ReadMaxFiles(self.max_files) if self.max_files else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self.target = _logged_files(self.counter)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # noqa: N802
        if "position" not in start:
            msg = f"the checkpoint's source offset {start} is not a file log position (written by an older release?)"
            raise ValueError(msg)
        pos = int(start["position"])
        end = _logged_files(self.counter) if self.target is None else self.target
        if isinstance(limit, ReadMaxFiles):
            end = min(end, pos + limit.max_files)
        return {"position": max(pos, end)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        lo, hi = int(start["position"]), int(end["position"])
        return [InputPartition((lo, hi))] if hi > lo else []

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        lo, hi = partition.value
        for pos in range(lo, hi):
            yield (pos,)


class LandingSource:
    """``source.path`` as a stream of micro-batches of files in name order (a :class:`StreamSource`)."""

    def __init__(self, spark: SparkSession, src: SourceConfig, schema: StructType, state_dir: str) -> None:
        self.spark = spark
        self.src = src
        self.schema = schema
        self.fs = HadoopFS(spark)
        files = f"{state_dir.rstrip('/')}/files"
        self.delta = src.format == "delta"  # a Delta table: its commits in order (io/delta_log.py)
        self.log = DeltaFileLog(self.fs, src.path, files, src.key("path")) if self.delta else FileLog(
            self.fs, src.path, files)
        self.offsets_dir: str | None = None  # use_offset_log
        self._tmp = Path(tempfile.mkdtemp(prefix="lowwater-files-"))
        self._counter = self._tmp / "files.json"

    def refresh(self) -> None:
        """List the landing directory, log the new files, and let the stream reader see them."""
        self.log.refresh()
        tmp = self._counter.with_suffix(".tmp")
        tmp.write_text(json.dumps({"files": len(self.log)}))
        os.replace(tmp, self._counter)

    def stream(self) -> DataFrame:
        self.spark.dataSource.register(LandedFiles)
        self.refresh()
        reader = self.spark.readStream.format(FORMAT).option("counter", str(self._counter))
        return reader.option("max_files", str(self.src.max_files_per_batch or "")).load()

    def use_offset_log(self, offsets_dir: str) -> None:
        """Read a micro-batch's positions from the query's offset log (``<checkpoint>/spark/offsets``)."""
        self.offsets_dir = offsets_dir.rstrip("/")

    def admit(self, batch: DataFrame) -> Admitted:
        logged = self._logged_range()
        if logged is not None:
            return self.admit_positions(list(range(*logged)))
        return self.admit_positions([int(r[0]) for r in batch.collect()])

    def _logged_range(self) -> tuple[int, int] | None:
        """The running micro-batch's ``[start, end)`` from Spark's offset log, without a Spark job; None if unsure."""
        if self.offsets_dir is None:
            return None
        got = logged_ranges(self.fs, self.offsets_dir, sources=1, files=1)
        return None if got is None else got[0]

    def admit_positions(self, positions: list[int]) -> Admitted:
        """The rows of the file log's ``positions`` (a micro-batch's range; the same after a replay)."""
        positions = sorted(positions)
        if not positions:
            return Admitted(empty_batch(self.spark, self.src, self.schema))
        if positions != list(range(positions[0], positions[-1] + 1)):
            msg = f"a micro-batch of the file log must be a range of positions, got {positions}"
            raise RuntimeError(msg)
        files = self.log.files(positions[0], positions[-1] + 1)
        out_of_order = [f.name for f in files if f.out_of_order]
        rows = self._read([f.name for f in files])
        if self.delta:
            rows = _in_commit_order(rows, self.src.path, [f.name for f in files])
        n_ooo = self._read(out_of_order).count() if out_of_order else 0
        return Admitted(rows, tuple(f.name for f in files), tuple(out_of_order), n_ooo)

    def _read(self, names: list[str]) -> DataFrame:
        """The files' rows; a file deleted since it was logged is skipped (and said so)."""
        for _ in range(3):  # a file may vanish between the check and Spark's own
            present = [n for n in names if self.fs.exists(self.log.path(n))]
            if len(present) < len(names):
                gone = sorted(set(names) - set(present))
                log.warning("skipped %d file(s) deleted after they landed: %s", len(gone), ", ".join(gone))
                names = present
            if not names:
                return empty_batch(self.spark, self.src, self.schema)
            try:
                return read_batch(self.spark, self.src, self.schema, [self.log.path(n) for n in names])
            except AnalysisException as e:
                if e.getCondition() != "PATH_NOT_FOUND":
                    raise
        return read_batch(self.spark, self.src, self.schema, [self.log.path(n) for n in names])

    @contextmanager
    def watching(self, poll_s: float | None) -> Iterator[None]:
        stop = threading.Event()

        def poll() -> None:
            while not stop.wait(poll_s):
                try:
                    self.refresh()
                except Exception as e:  # noqa: BLE001 - a failed listing is retried at the next poll
                    log.warning("listing %s failed (retried in %.1fs): %s", self.src.path, poll_s, e)

        thread = threading.Thread(target=poll, name="lowwater-listing", daemon=True) if poll_s else None
        if thread is not None:
            thread.start()
        try:
            yield
        finally:
            stop.set()
            if thread is not None:
                thread.join()
            shutil.rmtree(self._tmp, ignore_errors=True)


def logged_ranges(fs: HadoopFS, offsets_dir: str, sources: int, files: int) -> list[tuple[int, int]] | None:
    """The running micro-batch's ``[start, end)`` of each file log, from Spark's offset log; None if unsure.

    Spark writes ``offsets/<batch>`` (one end offset a line per source, in the query's order of sources)
    before it runs the batch and the next one only after this one is committed, so inside
    ``foreachBatch`` the newest entry is this batch; its start is the entry before it (the initial
    offset, position 0, for the first batch). The entry must have ``sources`` lines, the first ``files``
    of them file log positions; anything else (an unreadable entry) means: collect the positions instead.
    """
    try:
        batches = sorted(int(n) for n in fs.list_names(offsets_dir) if n.isdigit())
        if not batches:
            return None
        end = _logged_positions(fs, f"{offsets_dir}/{batches[-1]}", sources, files)
        start = [0] * files if batches[-1] == 0 else _logged_positions(
            fs, f"{offsets_dir}/{batches[-1] - 1}", sources, files)
    except Exception:  # noqa: BLE001 - any doubt about the log: collect the positions instead
        return None
    if start is None or end is None or any(b < a for a, b in zip(start, end, strict=True)):
        return None
    return list(zip(start, end, strict=True))


def _logged_positions(fs: HadoopFS, path: str, sources: int, files: int) -> list[int] | None:
    lines = [ln for ln in fs.read_text(path).splitlines()[2:] if ln.strip()]
    if len(lines) != sources:
        return None
    out = []
    for line in lines[:files]:
        offset = json.loads(line)
        if not (isinstance(offset, dict) and set(offset) == {"position"}):
            return None
        out.append(int(offset["position"]))
    return out


def _in_commit_order(rows: DataFrame, table: str, names: list[str]) -> DataFrame:
    """A Delta source's rows with ``_file`` = their file's logged name under the table, which sorts in commit
    order (``io/delta_log.order_key``); data file names are unique in a table, so the last path segment finds it."""
    keys = F.create_map(*[x for n in names for x in (F.lit(split_name(n)[1].rsplit("/", 1)[-1]),
                                                       F.lit(order_key(table, n)))])
    name = F.url_decode(F.element_at(F.split(F.col("_file"), "/"), -1))  # Spark's file_path is a URL
    return rows.withColumn("_file", F.element_at(keys, name))


def check_resumable(fs: HadoopFS, spark_checkpoint: str, cfg: PipelineConfig) -> None:
    """Refuse, in one line, a checkpoint whose source offsets are not file log positions.

    A checkpoint written by a lowwater that read the landing directory through
    Spark's own file source (``{"logOffset": n}``, files in modification-time
    order) cannot be resumed in name order: its micro-batches named other files.
    """
    offsets = f"{spark_checkpoint.rstrip('/')}/offsets"
    if not fs.exists(offsets):
        return
    batches = sorted((int(n) for n in fs.list_names(offsets) if n.isdigit()), reverse=True)
    if not batches:
        return
    last = fs.read_text(f"{offsets}/{batches[0]}").strip().splitlines()[-1]
    if '"position"' not in last:
        msg = (f"output.checkpoint: {cfg.output.checkpoint} was written by an older lowwater (Spark's file source, "
               f"offset {last}) and cannot be resumed with files in name order; {start_fresh(cfg)}")
        raise ConfigError(msg)
