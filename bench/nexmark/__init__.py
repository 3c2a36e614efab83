"""Nexmark with disorder: lowwater, native Spark and Flink 2.3 on the same bids, in one run.

    python -m bench.nexmark [--events N] [--engines lowwater,spark,flink-heap,flink-rocksdb] [--rounds K]

Method
------

**Data** (:mod:`bench.nexmark.generator`, seeded). The bid stream of Nexmark's
generator: event ids in epochs of 50 (1 person, 3 auctions, 46 bids), event
time = id / rate (default 10,000 events/s), Nexmark's hot auction (1/2 of the
bids) and hot bidder (3/4), its prices. Only bids are written: Q5, Q7 and Q11
read nothing else; ``--events`` counts bids. Disorder added on top: arrival =
event time + an exponential delay (mean 300 ms), 1 % of rows 2-20 s late;
8 source partitions (uniform); partition 6 lags, all its rows arriving 5 s
late (more than ``L``); partition 7 is idle, no row of it with an event time
in the middle fifth of the run (40-60 % of the span; its rows go to the
others). JSON lines, written once: ``slices/part-<slice>-p<k>.jsonl``, one
file per equal span of arrival time and partition (``--slices``, default one
per 100k rows), and ``partitions/p<k>.jsonl``, the same lines of partition
``k`` concatenated (for Flink, below).

**Queries.** Q5: hopping 10 s / 2 s, bids per auction. Q7: tumbling 10 s,
highest price (one global group; the count beside it). Q11: sessions with a
10 s gap per bidder, bids per session. Late rows are dropped by every engine;
``L`` = 2 s everywhere, no allowed lateness.

**Engines**, each on ``os.cpu_count()`` cores, each writing its results to files:

* *lowwater*: the pipeline ``<q>.toml`` (:func:`engines.lowwater_toml`:
  bounded watermark per partition, ``L``, ``idle_timeout = 5s`` on the
  arrival clock, the 8 partitions declared, ``max_files_per_batch`` = one
  slice), run as ``lowwater run <q>.toml --once --drain`` does, but inside
  the benchmark's SparkSession so that the JVM start is not timed;
* *native Spark*: Structured Streaming over ``slices/`` with
  ``maxFilesPerTrigger`` = one slice, ``withWatermark(L)``, ``groupBy(window
  | session_window, key)``, RocksDB state store, append mode, Parquet sink,
  available-now trigger, in the same SparkSession;
* *Flink 2.3* (:mod:`bench.nexmark.flink`): PyFlink ``apache-flink==2.3.0``
  in ``bench/out/flink-venv``, made by the first run; Flink SQL in streaming
  mode, one filesystem/JSON table per partition file with ``WATERMARK FOR
  ts AS ts - INTERVAL 'L' SECOND``, their ``UNION ALL`` (watermark = min over
  the partitions, as with one Kafka partition per split), on-event
  watermarks (``pipeline.auto-watermark-interval = 0``),
  ``table.exec.source.idle-timeout`` = 5 s, HOP / TUMBLE / SESSION window
  TVFs, ``parallelism.default`` = cores, state ``hashmap`` (heap) or
  ``rocksdb``, a checkpoint every 5 s, a filesystem/JSON sink. A Flink file
  is one split read in order, and a directory's files are handed out in no
  set order, so Flink reads one file per partition, not the slices.

**Figures**, per engine and query: events/s per core = bids / wall seconds
of the job / cores (the job: lowwater from building the engine to the end of
the drain; Spark from ``start()`` to the end of ``awaitTermination()``; Flink
from submitting the ``INSERT`` to its end, the final checkpoint included; no
engine's JVM start); with ``--rounds K`` each engine runs K times, the order
rotated each round, and the best round is kept (every round's time is
recorded). *Completeness* = rows counted in final results / rows (a Q5 row
counts once in each of its 5 windows). *Completeness over the body*: the
same over the windows ending by 75 % of the event-time span, against a count
made from the rows (:mod:`bench.nexmark.truth`), because native Spark cannot
fire the windows still open when bounded input ends (no batch follows the
last) while lowwater (``--drain``) and Flink (end of input) do. lowwater's
ratios to native Spark and to each Flink are given per query. One JSON line
per (query, engine) is appended to ``bench/results/nexmark.jsonl`` through
``bench.results.record`` (commit, UTC date, load average, machine, sizes,
the figures; lowwater's line carries its ratios).

**What the disorder does to each.** Native Spark keeps one watermark, the max
event time over all partitions minus ``L``: the lagging partition's rows
(5 s > ``L``) are late and dropped. lowwater and Flink take the min over
partitions: the lagging partition holds the watermark back and its rows
count. lowwater measures idleness on the arrival clock, so the idle
partition stops holding ``W`` after 5 s of arrivals without it. Flink's
idleness is wall-clock time and its partition files are read side by side
as fast as they can be, so neither the lag nor the idle stretch happens in
Flink's clock: its completeness reflects only the disorder within each
partition. The 1 % tail beyond ``L`` is too late for every engine.
"""
