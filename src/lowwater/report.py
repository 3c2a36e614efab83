"""Terminal reports (rich): the accounting summary of a run, the what-if grid, the delay profile.

On a terminal, tables fit its width. Piped or redirected (a file, a CI log),
they are printed at their full natural width: rich's default of 80 columns
would cut every column to ``…``. A missing value prints as ``-``, never
``None``.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


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
    t.add_row("windows fired", f"{summary['windows_fired']:,}")
    t.add_row("revisions", f"{summary['revisions']:,}")
    if summary.get("provisionals"):
        t.add_row("provisional (early)", f"{summary['provisionals']:,}")
    t.add_row("completeness", f"{summary['completeness']:.4%}")
    t.add_row("final watermark", str(summary["final_watermark"]))
    t.add_row("accounting balanced", "yes" if summary["balanced"] else "[red]NO[/]")
    print_table(console, t)
    console.print(f"outputs: {output_path}/{{results,late,dead_letter,metrics}}, {output_path}/summary.json")


def _s(x: float | None, unit: str = "s", digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}{unit}"


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
            f"{r['lateness']:g}s", f"{r['allowed_lateness']:g}s", f"{r['on_time']:,}", f"{r['late_updates']:,}",
            f"{r['too_late']:,}", f"{r['dead_letter']:,}", f"{r['completeness']:.4%}", f"{r['windows_fired']:,}",
            f"{r['windows_drain_only']:,}", _s(r["emit_latency_mean"]), _s(r["emit_latency_p99"]),
            f"{r['peak_open_windows']:,}",
        )
    print_table(console, t)
    worst = [r for r in results if r["too_late_by_partition"]]
    if worst:
        r = worst[0]
        parts = ", ".join(f"{p}: {n:,}" for p, n in sorted(r["too_late_by_partition"].items(), key=lambda x: -x[1])[:8])
        print_text(console, f"too late by partition at L={r['lateness']:g}s, G={r['allowed_lateness']:g}s: {parts}")


def print_delays(console: Console, profile: list[dict]) -> None:
    """Delay quantiles per partition (seconds)."""
    t = Table(title="arrival_time - event_time per partition (seconds)", title_justify="left")
    for col in ("partition", "rows", "p50", "p90", "p99", "p99.9", "max", "longest silence", "skew vs fastest"):
        t.add_column(col, justify="right")
    for r in profile:
        t.add_row(str(r["partition"]), f"{r['rows']:,}",
                  *(_s(r[k], "", 3) for k in ("p50", "p90", "p99", "p99_9", "max")),
                  _s(r["longest_gap"], "", 1), _s(r.get("skew"), "", 3))
    print_table(console, t)
    if profile:
        slow = max(profile, key=lambda r: r["skew"])
        gaps = [r["longest_gap"] for r in profile if r["longest_gap"] is not None]
        silence = f"longest silence {max(gaps):.0f}s" if gaps else "no partition has two arrivals"
        print_text(
            console,
            f"L for 99.9% of rows on their own partition: ~{max(r['p99_9'] for r in profile):.1f}s; "
            f"partition {slow['partition']} trails the fastest by {slow['skew']:.1f}s (median); "
            f"{silence} (idle_timeout should exceed normal gaps).",
        )
