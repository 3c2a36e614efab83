"""PostgreSQL sink: same rows as Parquet, exactly once, survives the database going away."""

from __future__ import annotations

import logging
import threading
import time
import tomllib

import pandas as pd
import psycopg
import pytest

from lowwater.config import ConfigError, parse_config
from lowwater.io import postgres as pg_module
from lowwater.io.postgres import PostgresError, PostgresSink, mask_url
from lowwater.spark.engine import Engine
from lowwater.testing.postgres import PASSWORD

from .test_cli import land, run_cli
from .test_crash import land_many

pytestmark = pytest.mark.spark


def pg_config(root, url: str, **pg) -> dict:  # noqa: ANN001
    data = tomllib.loads((root / "pipeline.toml").read_text())
    data["output"].update(kind="postgres", postgres={"url": url, **pg})
    return data


def table(url: str, name: str, pipeline: str, drop: tuple[str, ...] = ()) -> list[tuple]:
    with psycopg.connect(url) as conn:
        rows, cols = _fetch(conn, name, pipeline)
    df = pd.DataFrame(rows, columns=cols)
    df = df.drop(columns=["lw_pipeline", *[c for c in drop if c in df.columns]])
    return sorted(map(tuple, df.astype(str).itertuples(index=False)))


def _fetch(conn: psycopg.Connection, name: str, pipeline: str) -> tuple[list, list[str]]:
    cur = conn.execute(psycopg.sql.SQL("SELECT * FROM {} WHERE lw_pipeline = %s").format(
        psycopg.sql.Identifier(name)), (pipeline,))
    return cur.fetchall(), [d.name for d in cur.description]


def _frame(rows: list, cols: list[str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=cols)


def parquet(path) -> pd.DataFrame:  # noqa: ANN001
    df = pd.read_parquet(path)
    df["batch_id"] = df["batch_id"].astype(int)
    return df


def test_bad_table_names_are_one_config_error(tmp_path, monkeypatch):
    land(tmp_path, "jsonl")
    monkeypatch.delenv("LOWWATER_PG_URL", raising=False)
    for bad in ('res"ults', "results; DROP TABLE x", "1abc", "a.b"):
        with pytest.raises(ConfigError, match="output.postgres.results_table"):
            parse_config(pg_config(tmp_path, "postgresql://u:pw@h/db", results_table=bad), tmp_path)
    with pytest.raises(ConfigError, match="output.postgres.url"):
        parse_config(pg_config(tmp_path, ""), tmp_path)
    monkeypatch.setenv("LOWWATER_PG_URL", "postgresql://env:pw@h/db")
    cfg = parse_config(pg_config(tmp_path, "postgresql://file:pw@h/db"), tmp_path)
    assert cfg.output.postgres.url.startswith("postgresql://env:")  # the environment overrides the file
    assert "pw" not in repr(cfg.output.postgres)
    assert mask_url("postgresql://u:pw@h:5/db") == "postgresql://u:***@h:5/db"
    # The CLI: one line, exit code 2, before Spark starts.
    monkeypatch.delenv("LOWWATER_PG_URL")
    text = (tmp_path / "pipeline.toml").read_text().replace(
        '[output]\npath = "out"', '[output]\npath = "out"\nkind = "postgres"\n'
        '[output.postgres]\nurl = "postgresql://u:pw@h/db"\nlate_table = "x\\";drop table y;--"')
    (tmp_path / "pipeline.toml").write_text(text)
    proc = run_cli(["run", "pipeline.toml", "--once"], tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "output.postgres.late_table" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_postgres_equals_parquet_and_a_rerun_adds_nothing(spark, pg_server, tmp_path):
    land(tmp_path, "jsonl")
    cfg = parse_config(pg_config(tmp_path, pg_server.url, results_table="r1", late_table="l1",
                                 dead_letter_table="d1", metrics_table="m1"), tmp_path)
    Engine(cfg, spark).run(drain=True)
    pipe = cfg.output.path
    url = pg_server.url
    res = table(url, "r1", pipe)
    want = parquet(tmp_path / "out" / "results")
    assert len(res) == len(want) and (want["kind"] == "revision").sum() == 1
    cols = ["batch_id", "key", "count", "total", "biggest", "kind", "revision"]
    with psycopg.connect(url) as conn:
        got = _frame(*_fetch(conn, "r1", pipe))
        cur = _frame(*_fetch(conn, "r1_current", pipe))
        batches = conn.execute("SELECT count(*) FROM lowwater_batches WHERE lw_pipeline = %s", (pipe,)).fetchone()
        late = _frame(*_fetch(conn, "l1", pipe))
        metrics = _frame(*_fetch(conn, "m1", pipe))
    key = lambda df: sorted(map(tuple, df[cols].astype(str).itertuples(index=False)))  # noqa: E731
    assert key(got) == key(want)
    # the view: one row per window, the revision (count 3, total 8) for the late-updated one
    windows = want.drop_duplicates(["key", "window_start", "window_end"])
    assert len(cur) == len(windows) and cur["revision"].max() == 1
    assert sorted(cur["total"]) == sorted(want.sort_values("revision").drop_duplicates(
        ["key", "window_start"], keep="last")["total"])
    assert late["amount"].tolist() == [8.0]
    assert metrics["rows"].sum() == 8 and batches[0] == len(metrics) == 3
    # A second engine on the same checkpoint: nothing new, nothing doubled.
    Engine(cfg, spark).run(drain=True)
    assert table(url, "r1", pipe) == res
    # Replaying an already-delivered step is recognised and skipped (the batch id is there).
    sink = PostgresSink(cfg.output.postgres, pipe, cfg.window.key)
    sink.begin_step(0)
    assert sink.deliver(0, 0, {}) is False
    assert table(url, "r1", pipe) == res


def test_session_windows_reach_postgres_like_parquet(spark, pg_server, tmp_path):
    """Every engine path stages through the outputs layer: session results and late rows land too."""
    land(tmp_path, "jsonl")
    data = pg_config(tmp_path, pg_server.url, results_table="rs", late_table="ls", dead_letter_table="ds",
                     metrics_table="ms")
    data["window"] = {k: v for k, v in data["window"].items() if k not in ("size", "slide", "offset")}
    data["window"].update(type="session", gap="5s")
    cfg = parse_config(data, tmp_path)
    Engine(cfg, spark).run(drain=True)
    want = parquet(tmp_path / "out" / "results")
    cols = ["batch_id", "key", "window_start", "window_end", "count", "total", "kind", "revision"]
    with psycopg.connect(pg_server.url) as conn:
        got = _frame(*_fetch(conn, "rs", cfg.output.path))
        late = _frame(*_fetch(conn, "ls", cfg.output.path))
    for df in (got, want):
        for c in ("window_start", "window_end"):
            df[c] = pd.to_datetime(df[c], utc=True)
    key = lambda df: sorted(map(tuple, df[cols].astype(str).itertuples(index=False)))  # noqa: E731
    assert len(want) > 0 and key(got) == key(want)
    late_dir = tmp_path / "out" / "late"
    assert len(late) == (len(pd.read_parquet(late_dir)) if late_dir.exists() else 0)


# Five files a run (steps 0-4, the drain 5): the outages strike at steps 1 and 3, with steps on either side.
OUTAGE_TABLES = {"results_table": "r2", "late_table": "l2", "dead_letter_table": "d2", "metrics_table": "m2"}


@pytest.fixture(scope="module")
def clean_run(spark, pg_server, tmp_path_factory) -> str:  # noqa: ANN001
    """The uninterrupted reference of the database-outage tests: its pipeline name (output path)."""
    clean = tmp_path_factory.mktemp("clean")
    land_many(clean, files=5, rows_per_file=300)
    cfg = parse_config(pg_config(clean, pg_server.url, **OUTAGE_TABLES), clean)
    Engine(cfg, spark).run(drain=True)
    return cfg.output.path


def test_database_down_then_back_loses_and_doubles_nothing(spark, pg_server, clean_run, tmp_path, monkeypatch,
                                                           caplog):
    broken = tmp_path / "broken"
    land_many(broken, files=5, rows_per_file=300)
    b_cfg = parse_config(pg_config(broken, pg_server.url, retries=2, backoff="0.05s", **OUTAGE_TABLES), broken)

    real = PostgresSink.deliver

    def stop_at_step_3(self, step, spark_batch, metrics):  # noqa: ANN001, ANN202
        if step == 3:
            pg_server.stop()
        return real(self, step, spark_batch, metrics)

    monkeypatch.setattr(PostgresSink, "deliver", stop_at_step_3)
    caplog.set_level(logging.WARNING, logger="lowwater")
    try:
        with pytest.raises(PostgresError, match="delivering step 3 failed after 3 attempts") as exc:
            Engine(b_cfg, spark).run(drain=True)
    finally:
        pg_server.start()
    assert PASSWORD not in str(exc.value) and "***" in str(exc.value)
    retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert len(retries) == 2 and all(PASSWORD not in m and "***" in m for m in retries)
    monkeypatch.setattr(PostgresSink, "deliver", real)
    Engine(b_cfg, spark).run(drain=True)
    drop = ("duration_s", "watermark_lag_s", "source_file")
    for name in ("r2", "l2", "m2"):
        a = table(pg_server.url, name, clean_run, drop)
        b = table(pg_server.url, name, b_cfg.output.path, drop)
        assert a and b == a, name
    assert len(table(pg_server.url, "m2", b_cfg.output.path)) > 4  # the step that failed is in, once


def _outage_in_staging(real, marks, pg_server, down_s: float):  # noqa: ANN001, ANN202
    """A ``_copy_partition`` whose first executor function from step 3 on waits for the database to go down.

    The executor tasks touch ``marks/staging`` and wait for ``marks/stopped``; a driver thread
    stops the server on the first mark, writes the second, and starts the server ``down_s`` later.
    The tasks' retry lines go to ``marks/executor.log`` (executors log in their own processes).
    """
    state = {"armed": True}

    def driver_side() -> None:
        while not (marks / "staging").exists():
            time.sleep(0.05)
        pg_server.stop()
        (marks / "stopped").touch()
        time.sleep(down_s)
        pg_server.start()

    def patched(cfg, staging, pipeline, step, columns, jsonish):  # noqa: ANN001, ANN202
        fn = real(cfg, staging, pipeline, step, columns, jsonish)
        if step < 3 or not state["armed"]:
            return fn
        state["armed"] = False
        threading.Thread(target=driver_side, daemon=True).start()
        where = str(marks)

        def wrapped(batches):  # noqa: ANN001, ANN202 -- runs on an executor
            import logging
            import time
            from pathlib import Path

            lw = logging.getLogger("lowwater")
            handler = logging.FileHandler(Path(where) / "executor.log")
            lw.addHandler(handler)
            try:
                (Path(where) / "staging").touch()
                deadline = time.monotonic() + 60
                while not (Path(where) / "stopped").exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
                yield from fn(batches)
            finally:  # the Python worker is reused by later tasks
                lw.removeHandler(handler)
                handler.close()

        return wrapped

    return patched


def test_database_restarted_while_retrying_loses_and_doubles_nothing(spark, pg_server, clean_run, tmp_path,
                                                                      monkeypatch, caplog):
    """The server goes away twice mid-run -- during the executors' staging COPY and during the
    driver's delivery -- and is started again by a thread while the run retries: no error."""
    back = tmp_path / "back"
    land_many(back, files=5, rows_per_file=300)
    # retries 8, backoff 0.5s doubling: a retry window of ~90s against outages of ~2s
    k_cfg = parse_config(pg_config(back, pg_server.url, retries=8, backoff="0.5s", **OUTAGE_TABLES), back)

    real = PostgresSink.deliver
    timer = threading.Timer(1.5, pg_server.start)

    def outage_in_delivery(self, step, spark_batch, metrics):  # noqa: ANN001, ANN202
        if step == 1:  # down before the delivery's first attempt, back 1.5s later
            pg_server.stop()
            timer.start()
        return real(self, step, spark_batch, metrics)

    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setattr(PostgresSink, "deliver", outage_in_delivery)
    monkeypatch.setattr(pg_module, "_copy_partition", _outage_in_staging(pg_module._copy_partition, marks,
                                                                          pg_server, 2.0))
    caplog.set_level(logging.WARNING, logger="lowwater")
    Engine(k_cfg, spark).run(drain=True)  # no PostgresError
    timer.join()
    driver = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert any("delivering step 1 failed" in m for m in driver), driver
    executor = (marks / "executor.log").read_text().splitlines()
    assert any("staging step" in m and "retry 1/8" in m for m in executor), executor
    for m in driver + executor:
        assert PASSWORD not in m and "***" in m, m
    drop = ("duration_s", "watermark_lag_s", "source_file")
    for name in ("r2", "l2", "m2"):
        a = table(pg_server.url, name, clean_run, drop)
        b = table(pg_server.url, name, k_cfg.output.path, drop)
        assert a and b == a, name
    with psycopg.connect(pg_server.url) as conn:
        left = conn.execute("SELECT count(*) FROM r2_staging WHERE lw_pipeline = %s", (k_cfg.output.path,))
        assert left.fetchone()[0] == 0
