"""Run one Nexmark query on Flink SQL; executed by the Flink venv's Python, not lowwater's.

Standalone on purpose: it imports PyFlink and the standard library only, so
it runs in ``bench/out/flink-venv`` (see :mod:`bench.nexmark.flink`). One
argument, a JSON object: ``files`` (one JSON-lines file per source partition),
``query`` (q5 | q7 | q11), ``backend`` (hashmap | rocksdb), ``parallelism``,
``lateness_s``, ``idle_timeout_s``, ``out`` and ``work`` directories. Prints
one JSON line: ``{"seconds": ...}``, the wall time of the job (submission to
end, the JVM start excluded).

Each partition file is its own table with ``WATERMARK FOR ts AS ts - L``; the
query reads their ``UNION ALL``, whose watermark is the min over the inputs, as
with one Kafka partition per split. ``pipeline.auto-watermark-interval = 0``
makes the watermark assigner emit on every event that advances it (on-event
watermarks; the filesystem source does not take watermark push-down, so the
assigner runs right after each source).
"""

from __future__ import annotations

import json
import sys
import time

COLUMNS = ("`partition` INT, `offset` BIGINT, auction BIGINT, bidder BIGINT, price BIGINT, "
           "date_time BIGINT, arrival_time BIGINT")

QUERIES = {
    "q5": ("window_start TIMESTAMP(3), window_end TIMESTAMP(3), auction BIGINT, `count` BIGINT",
           "SELECT window_start, window_end, auction, COUNT(*) FROM TABLE(HOP(TABLE bids, DESCRIPTOR(ts), "
           "INTERVAL '2' SECOND, INTERVAL '10' SECOND)) GROUP BY window_start, window_end, auction"),
    "q7": ("window_start TIMESTAMP(3), window_end TIMESTAMP(3), max_price BIGINT, `count` BIGINT",
           "SELECT window_start, window_end, MAX(price), COUNT(*) FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), "
           "INTERVAL '10' SECOND)) GROUP BY window_start, window_end"),
    "q11": ("window_start TIMESTAMP(3), window_end TIMESTAMP(3), bidder BIGINT, `count` BIGINT",
            "SELECT window_start, window_end, bidder, COUNT(*) FROM TABLE(SESSION(TABLE bids PARTITION BY bidder, "
            "DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start, window_end, bidder"),
}


def main(spec: dict) -> dict:
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    conf = Configuration()
    for k, v in {
        "parallelism.default": str(spec["parallelism"]),
        "state.backend.type": spec["backend"],
        "execution.checkpointing.interval": "5 s",
        "execution.checkpointing.dir": "file://" + spec["work"] + "/checkpoints",
        "pipeline.auto-watermark-interval": "0 ms",
        "table.exec.source.idle-timeout": f"{spec['idle_timeout_s']} s",
        "table.local-time-zone": "UTC",  # windows over TIMESTAMP_LTZ align to the epoch, as Spark's and lowwater's
        "taskmanager.memory.process.size": spec.get("memory", "2g"),
    }.items():
        conf.set_string(k, v)
    env = TableEnvironment.create(EnvironmentSettings.new_instance().in_streaming_mode()
                                  .with_configuration(conf).build())
    names = []
    for i, path in enumerate(spec["files"]):
        env.execute_sql(
            f"CREATE TABLE bids_p{i} ({COLUMNS}, ts AS TO_TIMESTAMP_LTZ(date_time, 3), "
            f"WATERMARK FOR ts AS ts - INTERVAL '{spec['lateness_s']}' SECOND) "
            f"WITH ('connector' = 'filesystem', 'path' = 'file://{path}', 'format' = 'json')")
        names.append(f"SELECT * FROM bids_p{i}")
    env.execute_sql("CREATE TEMPORARY VIEW bids AS " + " UNION ALL ".join(names))
    schema, query = QUERIES[spec["query"]]
    env.execute_sql(f"CREATE TABLE sink ({schema}) WITH ('connector' = 'filesystem', "
                    f"'path' = 'file://{spec['out']}', 'format' = 'json')")
    t0 = time.monotonic()
    env.execute_sql(f"INSERT INTO sink {query}").wait()
    return {"seconds": time.monotonic() - t0}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
