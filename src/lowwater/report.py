"""Terminal reports (rich): the start line and the accounting summary of a run.

Styles come from :class:`~rich.text.Text` objects, never from markup in
strings: paths, partition names and values are printed as they are.

On a terminal, tables fit its width. Piped or redirected (a file, a CI log),
they are printed at their full natural width: rich's default of 80 columns
would cut every column to ``…``. A missing value prints as ``-``, never
``None``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from lowwater.time import NEG_INF, POS_INF, format_duration, format_ts

if TYPE_CHECKING:
    from lowwater.config import PipelineConfig, SourceConfig
    from lowwater.spark.state import Manifest


def start_line(cfg: PipelineConfig, manifest: Manifest, files: int | None, once: bool, drain: bool) -> str:
    """One line before the query starts: what is read, where the checkpoint is, whether it resumes."""
    found = "" if files is None else f", {files} file{'' if files == 1 else 's'} now"
    if manifest.step < 0:
        state = "new (no committed step)"
    else:
        w = manifest.tracker.get("watermark_us", NEG_INF) if manifest.tracker else NEG_INF
        shown = "+inf" if w >= POS_INF else format_ts(w)
        state = f"resuming after step {manifest.step} (W = {shown}{', drained' if manifest.drained else ''})"
    mode = "--drain" if drain else "--once" if once else "continuous; Ctrl-C stops after the current step"
    def zone(s: SourceConfig) -> str:  # said when set (naive timestamps are read as UTC otherwise)
        return f" (time zone {s.zone})" if s.time_zone is not None else ""

    if cfg.named_sources:
        reading = "; ".join(f"{s.name}: {s.format} from {s.path}{zone(s)}" for s in cfg.sources)
        reading = f"{len(cfg.sources)} source{'s' if cfg.multi_source else ''} ({reading}){found}"
    else:
        reading = f"{cfg.source.format} from {cfg.source.path}{zone(cfg.source)}{found}"
    return (f"lowwater run: reading {reading}; checkpoint {cfg.output.checkpoint}: "
            f"{state}; outputs {cfg.output.path} ({mode})")


def stop_line(signal_name: str, step: int, abandoned: bool) -> str:
    """The last line of a run a signal stopped: what the checkpoint holds, and a step left uncommitted only if one was.

    >>> stop_line("SIGTERM", 3, False)
    'stopped by SIGTERM: the checkpoint holds step 3; run the same command to resume'
    """
    held = f"the checkpoint holds step {step}" if step >= 0 else "no step was committed yet"
    flight = " (a step in flight was not committed: the restart redoes it)" if abandoned else ""
    return f"stopped by {signal_name}: {held}{flight}; run the same command to resume"


def print_table(console: Console, table: Table) -> None:
    """Print ``table``; when stdout is not a terminal, as wide as its content needs."""
    if console.is_terminal:
        console.print(table)
        return
    width = console.width
    need = console.measure(table, options=console.options.update_width(10_000)).maximum
    console.width = max(width, need)
    try:
        console.print(table)
    finally:
        console.width = width


def print_text(console: Console, text: str) -> None:
    """Sentences (advice): never cut into an 80-column block when piped."""
    console.print(text, soft_wrap=not console.is_terminal, highlight=False)


def print_summary(console: Console, summary: dict, output_path: str) -> None:
    """Print the SEMANTICS.md §6 totals of a run as a small table."""
    t = Table(title="lowwater run", show_header=False, title_justify="left")
    t.add_column("", style="bold")
    t.add_column("", justify="right")
    rows = summary["rows"]
    for k in ("rows", "on_time", "late_updates", "too_late", "dead_letter"):
        share = f"  ({summary[k] / rows:.2%})" if rows and k != "rows" else ""
        t.add_row(k, f"{summary[k]:,}{share}")
    joined = summary.get("join")  # a [join]: its rows emitted and each side's accounting (SEMANTICS.md §9)
    if joined is not None:
        t.add_row("joined rows emitted", f"{summary['windows_fired']:,}")
        for side, c in joined.items():
            pending = f", {c['pending']:,} pending" if c.get("pending") else ""
            t.add_row(f"join {side}", f"{c['matched']:,} matched, {c['unmatched']:,} unmatched, "
                                      f"{c['too_late']:,} too late, {c['dead_letter']:,} dead{pending}")
    else:
        t.add_row("windows fired", f"{summary['windows_fired']:,}")
    t.add_row("revisions", f"{summary['revisions']:,}")
    if summary.get("provisionals"):
        t.add_row("provisional (early)", f"{summary['provisionals']:,}")
    if summary.get("out_of_order_files"):
        t.add_row(Text("read out of name order", style="yellow"),
                  f"{summary['out_of_order_files']:,} files, {summary['out_of_order_rows']:,} rows")
    if summary.get("arrival_regressions"):
        t.add_row(Text("steps out of arrival order", style="yellow"), f"{summary['arrival_regressions']:,}")
    if summary.get("markers"):
        t.add_row("markers (not rows)", f"{summary['markers']:,}")
    if summary.get("regressions"):
        t.add_row("watermark proposals ignored", f"{summary['regressions']:,}")
    if summary.get("held_rows"):
        t.add_row(Text("held (not yet judged)", style="yellow"),
                  f"{summary['held_rows']:,} rows behind the arrival frontier (--drain judges them)")
    t.add_row("completeness", f"{summary['completeness']:.4%}")
    t.add_row("final watermark", str(summary["final_watermark"] or "undefined"))
    t.add_row("accounting balanced", "yes" if summary["balanced"] else Text("NO", style="red"))
    print_table(console, t)
    kinds = "joined,late,dead_letter,metrics,join_metrics" if joined is not None else "results,late,dead_letter,metrics"
    console.print(f"outputs: {output_path}/{{{kinds}}}, {output_path}/summary.json")


def _s(x: float | None) -> str:
    """Seconds as users write durations (``11h``, ``1h 30m``, ``250ms``); ``-`` when there is none."""
    return "-" if x is None else format_duration(x * 1e6)


def print_whatif(console: Console, results: list[dict]) -> None:
    """The what-if grid: one row per (L, G)."""
    silent = any(r["emit_latency_mean"] is None for r in results)
    t = Table(title="lowwater what-if replay", title_justify="left",
              caption="latency -: no window fired before the end of the log" if silent else None,
              caption_justify="left")
    for col in ("L", "G", "on time", "late upd.", "too late", "dead", "completeness", "fired", "drain only",
                "latency mean", "latency p99", "peak open"):
        t.add_column(col, justify="right")
    for r in results:
        t.add_row(
            _s(r["lateness"]), _s(r["allowed_lateness"]), f"{r['on_time']:,}", f"{r['late_updates']:,}",
            f"{r['too_late']:,}", f"{r['dead_letter']:,}", f"{r['completeness']:.4%}", f"{r['windows_fired']:,}",
            f"{r['windows_drain_only']:,}", _s(r["emit_latency_mean"]), _s(r["emit_latency_p99"]),
            f"{r['peak_open_windows']:,}",
        )
    print_table(console, t)
    worst = [r for r in results if r["too_late_by_partition"]]
    if worst:
        r = worst[0]
        parts = ", ".join(f"{p}: {n:,}" for p, n in sorted(r["too_late_by_partition"].items(), key=lambda x: -x[1])[:8])
        print_text(console, f"too late by partition at L={_s(r['lateness'])}, G={_s(r['allowed_lateness'])}: {parts}")


def print_compare(console: Console, rows: list[dict]) -> None:
    """``--compare``: one row per strategy (and G), replayed exactly on the same history."""
    graces = {r["allowed_lateness"] for r in rows}
    t = Table(title="watermark strategies on the same history", title_justify="left",
              caption="L range: the adaptive bound's lowest and highest value in force (sampled)",
              caption_justify="left")
    cols = ["strategy", *(["G"] if len(graces) > 1 else []), "on time", "late upd.", "too late", "completeness",
            "fired", "latency mean", "latency p99", "L range", "peak open"]
    for i, col in enumerate(cols):
        t.add_column(col, justify="left" if i == 0 else "right")
    for r in rows:
        span = r["lateness_range"]
        t.add_row(
            r["strategy"], *([_s(r["allowed_lateness"])] if len(graces) > 1 else []), f"{r['on_time']:,}",
            f"{r['late_updates']:,}", f"{r['too_late']:,}", f"{r['completeness']:.4%}", f"{r['windows_fired']:,}",
            _s(r["emit_latency_mean"]), _s(r["emit_latency_p99"]),
            "-" if span is None else f"{_s(span[0])} - {_s(span[1])}", f"{r['peak_open_windows']:,}",
        )
    print_table(console, t)


def print_delays(console: Console, profile: list[dict]) -> None:
    """Per partition: the out-of-orderness L must cover, the arrival delay, silences and skew; then the advice."""
    from lowwater.advisor.advice import delay_advice

    t = Table(title="delays per partition: out-of-orderness (event time behind the newest seen before; what L "
              "covers) and arrival delay (arrival_time - event_time)", title_justify="left")
    for col in ("partition", "rows", "behind p99", "behind p99.9", "behind max", "arrival p50", "arrival p90",
                "arrival p99", "arrival p99.9", "arrival max", "longest silence", "skew vs fastest"):
        t.add_column(col, justify="right")
    for r in profile:
        t.add_row(str(r["partition"]), f"{r['rows']:,}",
                  *(_s(r[k]) for k in ("ooo_p99", "ooo_p99_9", "ooo_max", "p50", "p90", "p99", "p99_9", "max")),
                  _s(r["longest_gap"]), _s(r.get("skew")))
    print_table(console, t)
    if profile:
        print_text(console, delay_advice(profile))
