"""Scenario runner: rows in arrival order, cut into micro-batches, through the real engine.

A scenario is a list of input rows (dicts) and where to cut them into
micro-batches. :func:`run_scenario` lands each cut as one JSON Lines file and
hands it to :meth:`Engine.process_batch` exactly as ``foreachBatch`` would,
then optionally drains, and returns every output as pandas frames. Tests use
it to hold the engine to hand-computed tables, and to check that any cutting
of the same log gives the same answer (SEMANTICS.md §8).

:func:`table` reads the small whitespace tables the scenario tests are
written in::

    p  t   key  amount
    0  1   a    1.0
    0  13  a    3.0
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from lowwater.config import parse_config
from lowwater.testing.outputs import read_output

DEFAULT_SCHEMA = "partition STRING, offset LONG, event_time DOUBLE, arrival_time DOUBLE, key STRING, amount DOUBLE"


def _cell(text: str) -> Any:
    if text in ("-", "null"):
        return None
    for cast in (int, float):
        with contextlib.suppress(ValueError):
            return cast(text)
    return text


def table(text: str) -> list[dict[str, Any]]:
    """Parse a whitespace table (header line first; ``#`` starts a comment; ``-`` is null)."""
    lines = [ln.split("#", 1)[0].strip() for ln in text.strip().splitlines()]
    lines = [ln for ln in lines if ln]
    header = lines[0].split()
    rows = []
    for ln in lines[1:]:
        cells = ln.split()
        if len(cells) != len(header):
            msg = f"row {ln!r} has {len(cells)} cells, header has {len(header)}"
            raise ValueError(msg)
        rows.append({h: _cell(c) for h, c in zip(header, cells, strict=True)})
    return rows


@dataclass
class Outcome:
    """Everything a run wrote, read back."""

    results: pd.DataFrame
    late: pd.DataFrame
    dead_letter: pd.DataFrame
    metrics: pd.DataFrame
    summary: dict
    reports: list = field(default_factory=list)

    def emissions(self) -> list[tuple]:
        """Results as sortable tuples without the when-columns (batch_id, watermark)."""
        cols = [c for c in self.results.columns if c not in ("batch_id", "watermark")]
        return sorted(tuple(_plain(v) for v in row) for row in self.results[cols].itertuples(index=False))

    def late_rows(self) -> list[tuple]:
        cols = [c for c in self.late.columns if c not in ("batch_id", "source_file")]
        return sorted(tuple(_plain(v) for v in row) for row in self.late[cols].itertuples(index=False))


def _plain(v: Any) -> Any:
    if isinstance(v, pd.Timestamp):
        return v.isoformat()
    if isinstance(v, float) and v != v:  # NaN
        return None
    return v


def base_config(**sections: dict[str, Any]) -> dict[str, Any]:
    """A scenario configuration: seconds as event time, explicit schema; sections override."""
    cfg: dict[str, Any] = {
        "source": {
            "format": "jsonl",
            "path": "landing",
            "partition": "partition",
            "event_time": "event_time",
            "time_unit": "s",
            "schema": DEFAULT_SCHEMA,
        },
        "watermark": {"max_out_of_orderness": "0s"},
        "window": {
            "type": "tumbling",
            "size": "10s",
            "allowed_lateness": "0s",
            "key": ["key"],
            "aggregations": {"total": "sum(amount)"},
        },
        "late": {"policy": "side_output"},
        "output": {"path": "out"},
    }
    for name, values in sections.items():
        cfg.setdefault(name, {}).update(values)
    return cfg


def _read(spark, path: Path) -> pd.DataFrame:  # noqa: ANN001
    if not path.exists():
        return pd.DataFrame()
    df = read_output(spark, path)
    return df


def run_scenario(
    spark,  # noqa: ANN001
    config: dict[str, Any],
    rows: Sequence[dict[str, Any]],
    cuts: Sequence[int] | None = None,
    drain: bool = True,
    workdir: Path | None = None,
    raw_lines: dict[int, list[str]] | None = None,
    clock: Callable[[], int] | None = None,
) -> Outcome:
    """Run ``rows`` (arrival order) through the engine, one micro-batch per cut.

    ``cuts`` are the indices where a new micro-batch starts (default: one
    batch). ``raw_lines`` appends verbatim lines (e.g. malformed JSON) to the
    file of the given batch. ``clock`` replaces the engine's processing-time
    clock (µs), e.g. to drive an ``every <duration>`` early trigger.
    """
    from lowwater.io.files import read_batch
    from lowwater.spark.engine import Engine

    work = Path(workdir or tempfile.mkdtemp(prefix="lowwater-scenario-"))
    landing = work / "landing"
    landing.mkdir(parents=True, exist_ok=True)
    bounds = [0, *sorted(set(c for c in (cuts or []) if 0 < c < len(rows))), len(rows)]
    files = []
    for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        f = landing / f"part-{i:05d}.jsonl"
        lines = [json.dumps(r) for r in rows[lo:hi]] + list((raw_lines or {}).get(i, []))
        f.write_text("\n".join(lines) + ("\n" if lines else ""))
        files.append(f)
    cfg = parse_config(config, base_dir=work)
    engine = Engine(cfg, spark)
    if clock is not None:
        engine.clock = clock
    for i, f in enumerate(files):
        engine.process_batch(read_batch(spark, cfg.source, engine.schema, path=str(f)), i)
    manifest = engine.drain() if drain else engine.store.latest()
    engine.close()  # give back the output path's lock
    summary = engine.summary(manifest)
    out = Path(cfg.output.path)
    return Outcome(
        results=_read(spark, out / "results"),
        late=_read(spark, out / "late"),
        dead_letter=_read(spark, out / "dead_letter"),
        metrics=_read(spark, out / "metrics"),
        summary=summary,
        reports=engine.reports,
    )
