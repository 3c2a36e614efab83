"""The Spark path of a scenario file: each source cut into files as the cutting says, through the engine.

Micro-batch ``i`` holds the ``i``-th file of every source that has one, so
the sources are cut independently (one in one file, another in many) and the
engine's arrival frontier must hold rows back for the result to match the
one-batch answer. The outcome is read back from the outputs in the form of
:class:`~lowwater.testing.scenario_files.Observed`, to be compared with the
scenario's ``expect`` and with the core path.
"""

from __future__ import annotations

import json
import tempfile
from functools import reduce
from pathlib import Path

import pandas as pd

from lowwater.core.tracker_state import NEG_INF
from lowwater.testing.outputs import read_output
from lowwater.testing.scenario_files import COUNT_KEYS, Observed, Scenario, _agg_names, _num


def _chunks(rows: list[dict], cuts: list[int]) -> list[list[dict]]:
    bounds = [0, *sorted(c for c in set(cuts) if 0 < c < len(rows)), len(rows)]
    return [rows[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]


def land_inputs(s: Scenario, cfg, cuts: dict[str, list[int]]) -> dict[str, list[Path]]:  # noqa: ANN001
    """Each source's rows as JSONL files in its landing directory, cut at ``cuts[name]``: {source: files}."""
    files: dict[str, list[Path]] = {}
    for src in cfg.sources:
        landing = Path(src.path)
        landing.mkdir(parents=True, exist_ok=True)
        files[src.name] = []
        for i, chunk in enumerate(_chunks(s.input[src.name], cuts.get(src.name, []))):
            f = landing / f"part-{i:05d}.jsonl"
            f.write_text("".join(json.dumps(r) + "\n" for r in chunk))
            files[src.name].append(f)
    return files


def run_spark(spark, s: Scenario, cuts: dict[str, list[int]], workdir: Path | None = None) -> Observed:  # noqa: ANN001
    """Run the scenario through the engine with one cutting, drain, and read what it wrote."""
    from lowwater.io.files import read_batch
    from lowwater.spark.engine import Engine

    work = Path(workdir or tempfile.mkdtemp(prefix="lowwater-scenario-"))
    cfg = s.pipeline(base_dir=work)
    files = land_inputs(s, cfg, cuts)
    engine = Engine(cfg, spark)
    try:
        for i in range(max(len(v) for v in files.values())):
            frames = []
            for src in cfg.sources:
                if i < len(files[src.name]):
                    raw = read_batch(spark, src, engine.schemas[src.name], path=str(files[src.name][i]))
                    frames.append(engine.normalised(src.name, raw) if cfg.named_sources else raw)
            engine.process_batch(reduce(lambda a, b: a.unionByName(b), frames), i)
        reports = list(engine.reports)  # one per micro-batch, before the drain's
        summary = engine.summary(engine.drain())
    finally:
        engine.close()
    out = Path(cfg.output.path)
    return _observed(spark, s, cfg, out, summary, reports)


def _read(spark, path: Path) -> pd.DataFrame:  # noqa: ANN001
    return read_output(spark, path) if path.exists() else pd.DataFrame()


def _secs(ts) -> float:  # noqa: ANN001
    return pd.Timestamp(ts).value / 1e9


def _observed(spark, s: Scenario, cfg, out: Path, summary: dict, reports: list | None = None) -> Observed:  # noqa: ANN001
    results = _read(spark, out / "results")
    key_cols = list(cfg.window.key)
    rows, batch_of = [], []
    for r in results.to_dict("records"):
        key = "|".join(str(r[k]) for k in key_cols)
        aggs = [None if pd.isna(r[a]) else _num(float(r[a])) for a in _agg_names(s)]
        rows.append((key, _secs(r["window_start"]), _secs(r["window_end"]), r["kind"], int(r["revision"]),
                     int(r["count"]), *aggs))
        batch_of.append(int(r["batch_id"]))
    by_name = {src.name: src for src in cfg.sources}
    late = _read(spark, out / "late")
    too_late, windows, late_batch = [], [], []
    for r in late.to_dict("records"):
        name = r.get("source", cfg.sources[0].name) if cfg.named_sources else "default"
        src = by_name.get(name, cfg.sources[0])
        part = str(r[src.partition]) if src.partition else "0"
        too_late.append((name, part, float(r[src.event_time])))
        late_batch.append(int(r["batch_id"]))
        windows.append((name, part, float(r[src.event_time]), _secs(r["window_start"]), _secs(r["window_end"]),
                        _secs(r["watermark"])))
    dead = _read(spark, out / "dead_letter")
    dead_letters = sorted(
        (str(r.get("source", "default")) if cfg.named_sources else "default", str(r["reason"]))
        for r in dead.to_dict("records")
    )
    return Observed(
        results=sorted(rows, key=lambda t: tuple((x is None, x) for x in t)),
        too_late=sorted(too_late),
        counts={k: int(summary.get(k, 0)) for k in (*COUNT_KEYS, "regressions")},
        dead_letters=dead_letters,
        too_late_windows=sorted(windows),
        steps=[_step(rep, rows, batch_of, too_late, late_batch) for rep in reports or []],
    )


def _step(rep, rows: list[tuple], batch_of: list[int], too_late: list[tuple], late_batch: list[int]) -> tuple:  # noqa: ANN001
    """(W after the step in seconds or None while undefined, its result rows, its too-late rows)."""
    w = None if rep.watermark_us <= NEG_INF else rep.watermark_us / 1e6
    panes = sorted((r for r, b in zip(rows, batch_of, strict=True) if b == rep.step),
                   key=lambda t: tuple((x is None, x) for x in t))
    return w, panes, sorted(r for r, b in zip(too_late, late_batch, strict=True) if b == rep.step)
