"""``lowwater run`` as a user runs it: a real streaming query in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from lowwater.config import ConfigError, load_config
from lowwater.spark.engine import Engine

from .helpers import fast_jvm, run_cli_here

pytestmark = pytest.mark.spark

CONFIG = """
[source]
format = "{fmt}"
path = "landing"
partition = "partition"
offset = "offset"
arrival_time = "arrival_time"
event_time = "event_time"
time_unit = "ms"
max_files_per_batch = 1

[watermark]
max_out_of_orderness = "2s"
idle_timeout = "1m"
partitions = [0, 1]

[window]
type = "tumbling"
size = "10s"
allowed_lateness = "5s"
key = ["key"]
aggregations = {{ total = "sum(amount)", biggest = "max(amount)" }}

[late]
policy = "side_output"

[output]
path = "out"

[spark]
master = "local[2]"
shuffle_partitions = 2
"""

ROWS = [
    # partition, offset, event ms, arrival ms, key, amount
    (0, 0, 1_000, 1_100, "a", 1.0),
    (1, 0, 2_000, 2_100, "a", 2.0),
    (0, 1, 13_000, 13_100, "b", 3.0),
    (1, 1, 14_000, 14_100, "a", 4.0),  # W -> 11s: [0,10) fires
    (0, 2, 7_000, 15_000, "a", 5.0),  # late update (10 + 5 > 11)
    (1, 2, 30_000, 30_100, "a", 6.0),
    (0, 3, 31_000, 31_100, "b", 7.0),  # W -> 28s
    (1, 3, 3_000, 32_000, "a", 8.0),  # too late (10 + 5 <= 28)
]


def run_cli(args: list[str], cwd: Path, timeout: int = 240, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess:
    env = fast_jvm({**(os.environ if env is None else env), "PYSPARK_PYTHON": sys.executable})
    return subprocess.run(
        [sys.executable, "-m", "lowwater.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


def land(tmp_path: Path, fmt: str) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    cols = ["partition", "offset", "event_time", "arrival_time", "key", "amount"]
    for i, chunk in enumerate((ROWS[:4], ROWS[4:])):
        df = pd.DataFrame(chunk, columns=cols)
        path = landing / f"part-{i:03d}.{'jsonl' if fmt == 'jsonl' else fmt}"
        if fmt == "jsonl":
            df.to_json(path, orient="records", lines=True)
        elif fmt == "csv":
            df.to_csv(path, index=False)
        else:
            df.to_parquet(path, index=False)
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    (tmp_path / "pipeline.toml").write_text(CONFIG.format(fmt=fmt))


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_run_once_drain_end_to_end(tmp_path, fmt, spark):
    land(tmp_path, fmt)
    # In this process (a JVM start less); the real process, its start-up and exit code, is the restart below.
    proc = run_cli_here(["run", "pipeline.toml", "--once", "--drain", "-q"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (summary["rows"], summary["on_time"], summary["late_updates"], summary["too_late"]) == (8, 6, 1, 1)
    assert summary["balanced"] and summary["drained"]
    results = pd.read_parquet(tmp_path / "out" / "results")
    rev = results[results["kind"] == "revision"]
    assert len(rev) == 1 and rev.iloc[0]["count"] == 3 and rev.iloc[0]["total"] == 8.0
    late = pd.read_parquet(tmp_path / "out" / "late")
    assert late["amount"].tolist() == [8.0] and late["reason"].str.startswith("too late").all()
    metrics = pd.read_parquet(tmp_path / "out" / "metrics")
    assert metrics["rows"].sum() == 8 and set(metrics["batch_id"].astype(int)) == {0, 1, 2}
    assert "rows" in proc.stdout  # the summary table

    if fmt != "jsonl":  # the restart below does not depend on the format (one JVM start fewer each)
        return
    # A second run with nothing new, as a user starts it (a process), is a no-op: same results, nothing doubled.
    again = run_cli(["run", "pipeline.toml", "--once", "--drain", "-q"], tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(pd.read_parquet(tmp_path / "out" / "results")) == len(results)
    # ... and says so, after a start line naming the checkpoint it resumes; -q: no Spark banner.
    assert again.stderr.splitlines() == [
        f"lowwater run: reading jsonl from {tmp_path / 'landing'}, 2 files now; checkpoint "
        f"{tmp_path / 'out' / '_checkpoint'}: resuming after step 2 (W = +inf, drained); outputs "
        f"{tmp_path / 'out'} (--drain)",
        f"nothing new in {tmp_path / 'landing'} since step 2: outputs unchanged",
    ]


def test_bad_configuration_is_one_line_and_exit_2(tmp_path):
    land(tmp_path, "jsonl")
    cfg = tmp_path / "pipeline.toml"
    cfg.write_text(cfg.read_text().replace('max_out_of_orderness = "2s"', 'max_out_of_orderness = "2 fortnights"'))
    proc = run_cli(["run", "pipeline.toml", "--once"], tmp_path, timeout=60)
    assert proc.returncode == 2
    assert "watermark.max_out_of_orderness" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_missing_column_is_one_line_and_exit_2(tmp_path):
    land(tmp_path, "jsonl")
    proc = run_cli(["run", "pipeline.toml", "--once", "--set", 'source.event_time="when"'], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    err = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "source.event_time" in err[0] and "'when'" in err[0]
    assert "Traceback" not in proc.stderr and "at org.apache" not in proc.stderr


def _edit(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new)


# Failures found before Spark starts (fast: no JVM): one line on stderr, exit 2, the user's
# text printed as written (rich markup would swallow "[observer]" and "[source]").
BEFORE_SPARK = [
    # (name, edit of the TOML text, extra CLI args, expected text of the one stderr line)
    ("unknown section", lambda t: t + "\n[observer]\nx = 1\n", [],
     "error: unknown section [observer] (expected one of alerts, join, late, observe, output, source, spark, trigger, "
     "watermark, window)"),
    ("section not a table", lambda t: "source = 1\n" + t.replace("[source]", "[other]"), [],
     "error: [source] must be a table"),
    ("bracketed value", lambda t: _edit(t, 'type = "tumbling"', 'type = "[t]"'), [],
     "error: window.type: '[t]' is not one of tumbling, hopping, session"),
    ("missing source path", lambda t: _edit(t, 'path = "landing"', 'path = "landing-[nope]"'), [],
     "error: source.path: {root}/landing-[nope] does not exist (relative paths resolve against the "
     "configuration file's directory, {root})"),
    # --set values follow the same rule as the file: relative to the configuration file's directory
    ("missing path via --set", lambda t: t, ["--set", 'source.path="elsewhere"'],
     "error: source.path: {root}/elsewhere does not exist (relative paths resolve against the "
     "configuration file's directory, {root})"),
    ("bad --set", lambda t: t, ["--set", "spark"], "error: --set 'spark': expected section.key=value"),
    ("empty landing, --once", lambda t: _edit(t, 'path = "landing"', 'path = "empty"'), [],
     "error: source.path: {root}/empty has no files to infer the schema from; add files or set source.schema"),
    ("no such config", None, [], "error: configuration file not found: nowhere.toml"),
]


@pytest.mark.parametrize(("name", "edit", "args", "expected"), BEFORE_SPARK, ids=[c[0] for c in BEFORE_SPARK])
def test_failures_before_spark_are_one_plain_line_and_exit_2(tmp_path, name, edit, args, expected):
    land(tmp_path, "jsonl")
    (tmp_path / "empty").mkdir()
    cfg = tmp_path / "pipeline.toml"
    if edit is not None:
        cfg.write_text(edit(cfg.read_text()))
    # run from another directory: relative paths must not depend on it
    cwd = tmp_path / "elsewhere-cwd"
    cwd.mkdir()
    target = str(cfg) if edit is not None else "nowhere.toml"
    proc = run_cli(["run", target, "--once", *args], cwd, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [expected.format(root=tmp_path)]
    assert proc.stdout == ""


def test_version_and_help_on_every_option():
    proc = subprocess.run([sys.executable, "-m", "lowwater.cli", "--version"], capture_output=True, text=True,
                          timeout=60)
    from lowwater import __version__

    assert proc.returncode == 0 and proc.stdout.strip() == f"lowwater {__version__}"
    import typing

    from typer.models import OptionInfo

    from lowwater.cli import app

    callbacks = [c.callback for c in app.registered_commands] + [app.registered_callback.callback]
    checked = 0
    for fn in callbacks:
        for pname, hint in typing.get_type_hints(fn, include_extras=True).items():
            for meta in getattr(hint, "__metadata__", ()):
                if isinstance(meta, OptionInfo):
                    assert meta.help, f"{fn.__name__} --{pname} has no help text"
                    checked += 1
    assert checked >= 30  # run 4 + demo 5 + whatif 23 + delays 9 + --version


def _land_epoch(root: Path, scale: int) -> None:
    """The ROWS with epoch clocks: ms since 2023-11-14 times ``scale`` (1 = ms, 1000 = µs)."""
    land(root, "jsonl")
    for f in (root / "landing").iterdir():
        df = pd.read_json(f, lines=True)
        for c in ("event_time", "arrival_time"):
            df[c] = (df[c] + 1_700_000_000_000) * scale
        mtime = f.stat().st_mtime
        df.to_json(f, orient="records", lines=True)
        os.utime(f, (mtime, mtime))  # keep the landing order


def test_event_times_in_the_wrong_unit_are_one_line_and_exit_2(tmp_path, spark):
    # Epoch milliseconds read as seconds: the CLI names the unit that fits; nothing is committed.
    _land_epoch(tmp_path, 1)
    # In this process (the subject is the message; a real process's JVM noise is test_missing_column's)
    proc = run_cli_here(["run", "pipeline.toml", "--once", "-q", "--set", 'source.time_unit="s"'], tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert [ln for ln in proc.stderr.splitlines() if not ln.startswith("lowwater run: ")] == [
        'error: source.time_unit: event times such as 1700000013000 (event_time) do not fit: read as time_unit = '
        '"s" they fall after the year 2200; as "ms" they are 2023-11-14: set source.time_unit = "ms"'
    ]
    assert not list((tmp_path / "out").rglob("manifest-*.json"))
    # In the unit they are written in, the same files run.
    ok = load_config(tmp_path / "pipeline.toml", ['output.path="out-ms"'])
    assert Engine(ok, spark).run(once=True).totals["rows"] == 4 + 4

    # Epoch microseconds read as seconds overflow int64 µs: no Spark overflow error, the same line.
    us = tmp_path / "us"
    us.mkdir()
    _land_epoch(us, 1000)
    cfg = load_config(us / "pipeline.toml", ['source.time_unit="s"'])
    with pytest.raises(ConfigError) as e:
        Engine(cfg, spark).run(once=True)
    assert str(e.value) == (
        'source.time_unit: event times such as 1700000001000000 (event_time) do not fit: read as time_unit = "s" '
        'they fall after the year 2200; as "us" they are 2023-11-14: set source.time_unit = "us"'
    )
