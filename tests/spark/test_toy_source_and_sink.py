"""A new source kind and a new sink are one module plus one registration line each (issue 34 item 7).

The toy source, ``format = "spark_json"``: Spark's own JSON file source, one
file a micro-batch in modification-time order (not lowwater's file log in name
order). The toy sink, ``[output] kind = "json_copy"``: every frame it is given
as JSON lines under ``<output>/json_copy/<kind>/batch_id=<step>``, overwritten
by a replayed step. Registered here, they run a pipeline through the engine;
no existing file knows them.

A kind may also declare what the engine asks of every source (``io/source.SourceKind``):
its own schema, the layout its rows arrive in, its partitions as lanes of the
arrival frontier and how to tell which are caught up. The toy
``spark_json_lanes`` declares all four; the engine asks it as it asks Kafka.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, _parse_datatype_string

from lowwater.config import ConfigError, SourceConfig, parse_config
from lowwater.io.files import infer_schema
from lowwater.io.headers import read_header
from lowwater.io.sink import SinkContext, register_sink, unregister_sink
from lowwater.io.source import (
    Admitted,
    SourceKind,
    lanes_of,
    register_source_kind,
    source_kind,
    unregister_source_kind,
)
from lowwater.io.sources import UnionSource
from lowwater.spark.engine import Engine

from .test_cli import CONFIG, ROWS

pytestmark = pytest.mark.spark

SCHEMA = "partition INT, offset LONG, event_time LONG, arrival_time LONG, key STRING, amount DOUBLE"


class SparkJsonSource:
    """A :class:`~lowwater.io.source.StreamSource`: Spark's JSON file stream, one file a micro-batch."""

    def __init__(self, spark: SparkSession, src: SourceConfig, schema: StructType, state_dir: str) -> None:
        self.spark, self.src, self.schema = spark, src, schema

    def stream(self) -> DataFrame:
        return (self.spark.readStream.schema(self.schema).option("maxFilesPerTrigger", 1).json(self.src.path)
                .select("*", F.col("_metadata.file_name").alias("_file")))

    def admit(self, batch: DataFrame) -> Admitted:
        rows = batch.withColumn("_block", F.monotonically_increasing_id())  # the order within the file
        return Admitted(rows, tuple(sorted(r[0] for r in batch.select("_file").distinct().collect())))

    @contextmanager
    def watching(self, poll_s: float | None) -> Iterator[None]:
        yield  # Spark's file source lists the directory itself


class JsonCopySink:
    """A :class:`~lowwater.io.sink.Sink`: each frame as JSON lines, idempotent by step (overwrite)."""

    def __init__(self, ctx: SinkContext) -> None:
        self.spark, self.root = ctx.spark, f"{ctx.cfg.output.path}/json_copy"

    def prepare(self, kind: str, empty: DataFrame | pa.Table, spark_schema: StructType | None) -> None:
        """Nothing to create: a kind's directory appears with its first rows."""

    def begin_step(self, step: int) -> None:
        """Nothing to forget: every write of the step overwrites its directory."""

    def write(self, kind: str, step: int, frame: DataFrame) -> None:
        frame.write.mode("overwrite").json(f"{self.root}/{kind}/batch_id={step}")

    def clear(self, kind: str, step: int) -> None:
        """An earlier attempt's rows of the step would be overwritten by a later write (toy: no removal)."""

    def write_rows(self, kind: str, step: int, table: pa.Table, spark_schema: StructType) -> None:
        self.write(kind, step, self.spark.createDataFrame(table, spark_schema))

    def deliver(self, step: int, spark_batch: int, metrics: dict[str, Any]) -> None:
        """Every write is final when made."""


class EveryLaneCaughtUp:
    """A :class:`~lowwater.io.source.CaughtUp`: the toy's two partitions, both caught up at every step."""

    asked: list[int] = []

    def logs(self, spark_batch: int, stream: object) -> dict[str, bool]:
        self.asked.append(spark_batch)
        return {"lane-0": True, "lane-1": True}

    def close(self) -> None:
        """Nothing held."""


class PartitionedJsonKind(SourceKind):
    """What ``spark_json_lanes`` declares: its schema, each partition a lane, its rows' layout, caught-up lanes."""

    partition_lanes = True

    def fixed_schema(self, src: SourceConfig) -> StructType:
        return _parse_datatype_string(SCHEMA)

    def layout(self, schema: StructType) -> StructType:
        return StructType([*schema.fields, StructField("_file", StringType()), StructField("_block", LongType())])

    def caught_up(self, spark: SparkSession, cfg: Any) -> EveryLaneCaughtUp:  # noqa: ANN401
        return EveryLaneCaughtUp()


@pytest.fixture
def registered():
    register_source_kind("spark_json", SparkJsonSource)  # the source's one registration line
    register_sink("json_copy", JsonCopySink)  # the sink's one registration line
    yield
    unregister_source_kind("spark_json")
    unregister_sink("json_copy")


def _config(root, **extra: Any) -> dict[str, Any]:  # noqa: ANN001
    import tomllib

    data = tomllib.loads(CONFIG.format(fmt="spark_json"))
    data["source"]["schema"] = SCHEMA
    data["output"].update(extra)
    return data


def test_a_registered_kind_is_configurable_and_refused_once_unregistered(registered, tmp_path):
    cfg = parse_config(_config(tmp_path, kind="json_copy"), tmp_path)
    assert (cfg.source.format, cfg.output.kind) == ("spark_json", "json_copy")
    # Without a schema its columns are known only once Spark runs: no header read, and one line at the start.
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "a.json").write_text('{"key": "a"}\n')
    no_schema = parse_config({**_config(tmp_path), "source": {
        k: v for k, v in _config(tmp_path)["source"].items() if k != "schema"}}, tmp_path)
    assert read_header(no_schema.source) is None
    with pytest.raises(ConfigError, match=r"^source\.schema: required with format = 'spark_json'"):
        infer_schema(None, no_schema.source)
    # Several [[source]] tables take landing directories and topics only: one line, before Spark is asked.
    union = _config(tmp_path)
    union["source"] = [{**union["source"], "name": "toy", "watermark": union.pop("watermark")}]
    with pytest.raises(ConfigError, match=r"^source\.toy\.format: 'spark_json' is a registered source kind"):
        UnionSource(None, parse_config(union, tmp_path), {}, "")
    with pytest.raises(ValueError, match="registered already"):
        register_sink("json_copy", JsonCopySink)
    with pytest.raises(ValueError, match="registered already"):
        register_source_kind("spark_json", SparkJsonSource)
    unregister_sink("json_copy")
    unregister_source_kind("spark_json")
    try:
        with pytest.raises(ConfigError, match=r"^source\.format: 'spark_json' is not one of jsonl, csv, parquet"):
            parse_config(_config(tmp_path), tmp_path)
        files = _config(tmp_path, kind="json_copy")
        files["source"]["format"] = "jsonl"
        with pytest.raises(ConfigError, match=r"^output\.kind: 'json_copy' is not one of parquet, postgres, delta$"):
            parse_config(files, tmp_path)
    finally:  # the fixture unregisters them again
        register_source_kind("spark_json", SparkJsonSource)
        register_sink("json_copy", JsonCopySink)


def test_the_toy_source_feeds_the_engine_and_the_toy_sink_receives_what_parquet_does(registered, spark, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    cols = ["partition", "offset", "event_time", "arrival_time", "key", "amount"]
    for i, chunk in enumerate((ROWS[:4], ROWS[4:])):
        path = landing / f"part-{i:03d}.json"
        pd.DataFrame(chunk, columns=cols).to_json(path, orient="records", lines=True)
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # Spark's file source: modification-time order
    cfg = parse_config(_config(tmp_path, kind="json_copy"), tmp_path)
    manifest = Engine(cfg, spark).run(drain=True)
    assert manifest.totals["rows"] == len(ROWS) and manifest.totals["too_late"] == 1  # as with the landing source
    out = tmp_path / "out"
    fields = ["batch_id", "key", "count", "total", "kind", "revision"]

    def rows(path: str) -> list[tuple]:
        df = spark.read.json(path) if "json_copy" in path else spark.read.parquet(path)
        return sorted(tuple(str(r[c]) for c in fields) for r in df.collect())

    parquet = rows(str(out / "results"))
    assert len(parquet) > 0 and rows(str(out / "json_copy" / "results")) == parquet
    late = spark.read.json(str(out / "json_copy" / "late")).select("amount").collect()
    assert [r[0] for r in late] == [8.0]
    steps = spark.read.json(str(out / "json_copy" / "metrics")).select("batch_id", "rows").collect()
    assert sorted((r[0], r[1]) for r in steps) == [(0, 4), (1, 4), (2, 0)]


def test_a_kind_declares_its_schema_lanes_and_layout_and_the_engine_asks_it(registered, spark, tmp_path):
    register_source_kind("spark_json_lanes", SparkJsonSource, PartitionedJsonKind())  # one line, a kind of its own
    try:
        data = _config(tmp_path)
        del data["source"]["schema"]  # the kind fixes its own
        data["source"]["format"] = "spark_json_lanes"
        cfg = parse_config(data, tmp_path)
        assert isinstance(source_kind(cfg.source), PartitionedJsonKind)
        assert lanes_of(cfg).hold and lanes_of(cfg).by_partition == (cfg.source.name,)
        engine = Engine(cfg, spark)
        try:
            assert engine.schema == _parse_datatype_string(SCHEMA)  # no schema key, no file read
            assert engine.held is not None  # its partitions are lanes: rows may wait behind the frontier
            assert "_carried" not in engine.held.layout.fieldNames() and "_event_us" in engine.held.layout.fieldNames()
            assert engine.planner.frontier is not None  # the same lanes on either row clock
            assert engine.row_clock is None or engine.row_clock.frontier is not None
            assert engine.inputs.caught_up(7, None) == {"lane-0": True, "lane-1": True}
            assert EveryLaneCaughtUp.asked[-1] == 7
        finally:
            engine.close()
        # The toy of the other tests declares nothing: one lane, nothing held, nothing to ask.
        plain = parse_config(_config(tmp_path / "plain"), tmp_path / "plain")
        assert not lanes_of(plain).hold
        engine = Engine(plain, spark)
        try:
            assert engine.held is None and engine.planner.frontier is None
            assert engine.inputs.caught_up(7, None) is None
        finally:
            engine.close()
    finally:
        unregister_source_kind("spark_json_lanes")
