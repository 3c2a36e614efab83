"""Terminal reports (rich): the accounting summary of a run."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


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
    t.add_row("completeness", f"{summary['completeness']:.4%}")
    t.add_row("final watermark", str(summary["final_watermark"]))
    t.add_row("accounting balanced", "yes" if summary["balanced"] else "[red]NO[/]")
    console.print(t)
    console.print(f"outputs: {output_path}/{{results,late,dead_letter,metrics}}, {output_path}/summary.json")
