"""The reports of ``lowwater reconcile``: ``reconcile/`` Parquet, the terminal summary, ``--json``, ``--plot``."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from rich.console import Console
from rich.table import Table
from rich.text import Text

from lowwater.core.reconcile import CAUSES
from lowwater.report import print_table


def write_parquet(frame: DataFrame, path: str) -> T.StructType:
    """One row per differing window (overwritten by each reconcile: it is the latest comparison); the schema
    written (the frame's columns without the internal ``_`` ones).

    Written by the tasks that compare (``job.reconcile``, with the outputs' Parquet settings in force), a file
    each.
    """
    out = frame.select(*[c for c in frame.columns if not c.startswith("_")])
    out.write.mode("overwrite").parquet(path)
    return out.schema


def print_summary(out: Console, s: dict) -> None:
    """Windows checked and differing, rows and value by cause, the largest differences, the unexplained ones."""
    t = Table(title="lowwater reconcile", show_header=False)
    t.add_column(style="bold")
    t.add_column(justify="right")
    rows = [
        ("stream", f"step {s['stream_step']}, watermark {s['stream_watermark']}, "
                   f"{s['files_read']} of {s['files_landed']} files read"),
        ("rows (valid)", f"{s['rows']:,}"), ("dead letters (in no result)", f"{s['dead_letter']:,}"),
        ("windows checked", f"{s['windows_checked']:,}"), ("windows differing", f"{s['windows_differing']:,}"),
        ("windows open (not fired)", f"{s['windows_open']:,}"), ("unexplained", f"{s['unexplained']:,}"),
    ]
    for c in CAUSES:
        vals = s["causes"][c]
        extra = ", ".join(f"{k} {_fmt(v)}" for k, v in vals.items() if k != "rows")
        rows.append((f"{c.replace('_', ' ')}", f"{_fmt(vals['rows'])} rows" + (f" ({extra})" if extra else "")))
    if s.get("not_compared"):
        rows.append(("not compared", ", ".join(f"{c} in {n:,} window(s)" for c, n in s["not_compared"].items())))
    if "corrections" in s:
        rows.append(("corrections applied", f"{s['corrections']:,}"))
    for k, v in rows:
        t.add_row(Text(k), Text(str(v)))
    print_table(out, t)  # redirected: at its full width, not cut at 80 columns (report.print_table)
    if s["largest"]:
        big = Table(title="largest differences")
        cols = list(s["largest"][0])
        for c in cols:
            big.add_column(c)
        for r in s["largest"]:
            big.add_row(*[Text(_fmt(r[c])) for c in cols])
        print_table(out, big)
    for w in s["unexplained_windows"]:
        out.print(Text.assemble(("unexplained: ", "bold red"), Text(_name(w))))
    verdict = ("every difference is explained" if not s["unexplained"]
               else f"{s['unexplained']} window(s) unexplained: a lowwater defect or an edited sink")
    out.print(Text(verdict, style="bold green" if not s["unexplained"] else "bold red"))


def _name(w: dict) -> str:
    """A window as one line: its keys, its bounds, and the unexplained remainder per aggregate."""
    parts = [f"{k}={v}" for k, v in w.items() if not k.startswith("unexplained_")]
    rest = [f"{k[len('unexplained_'):]} off by {_fmt(v)}" for k, v in w.items()
            if k.startswith("unexplained_") and v is not None]
    return " ".join(parts) + (": " + ", ".join(rest) if rest else "")


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:,.6g}"
    if isinstance(v, int):
        return f"{v:,}"
    return "-" if v is None else str(v)


def write_json(path: Path, s: dict) -> None:
    path.write_text(json.dumps(s, indent=2, default=str) + "\n")


def plot(frame: DataFrame, path: Path, measure: str) -> None:
    """An HTML page: the difference of ``measure`` over event time (window start), one trace per cause.

    Self-contained (plotly's script inline), so it opens offline. Each point is
    the sum over the differing windows starting at that time.
    """
    cols = [F.sum(F.col(f"{c}_{measure}" if measure != "count" else f"{c}_rows")).alias(c) for c in CAUSES]
    diff = f"unexplained_{measure}"
    pdf = (frame.groupBy("window_start").agg(*cols, F.sum(F.coalesce(F.col(diff), F.lit(0))).alias("unexplained"))
           .orderBy("window_start").toPandas())
    path.write_text(figure(pdf, measure).to_html(include_plotlyjs=True, full_html=True), encoding="utf-8")


def figure(pdf, measure: str):  # noqa: ANN001, ANN201 - a pandas DataFrame in, a plotly Figure out
    """The bars of :func:`plot`: one trace per cause with a difference, named in a legend (also when alone)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for c in [*CAUSES, "unexplained"]:
        if len(pdf) and pdf[c].fillna(0).astype(float).abs().sum() > 0:
            fig.add_bar(x=pdf["window_start"], y=pdf[c].astype(float), name=c.replace("_", " "))
    fig.update_layout(barmode="relative", title=f"batch truth - stream ({measure}) by cause, over event time",
                      xaxis_title="window start (UTC)", yaxis_title=f"difference in {measure}",
                      showlegend=True, legend_title_text="cause")  # plotly hides a legend of one trace
    return fig
