"""``lowwater reconcile``'s terminal table and plot (no Spark): full width when redirected, a legend always."""

from __future__ import annotations

import io

import pandas as pd
from rich.console import Console

from lowwater.core.reconcile import CAUSES
from lowwater.reconcile.report import figure, print_summary


def _summary() -> dict:
    causes = {c: {"rows": 0} for c in CAUSES}
    causes["too_late"] = {"rows": 1_234, "sum_amount": 98_765.4321, "count": 1_234}
    return {
        "stream_step": 41, "stream_watermark": "2013-01-31T23:59:00Z", "files_read": 744, "files_landed": 744,
        "rows": 26_398, "dead_letter": 0, "windows_checked": 5_000, "windows_differing": 3, "windows_open": 2,
        "unexplained": 0, "causes": causes, "unexplained_windows": [],
        "largest": [{"origin": "EWR", "window_start": "2013-01-01T00:00:00Z", "window_end": "2013-01-01T01:00:00Z",
                     "too_late_rows": 12, "too_late_sum_amount": 1234.5, "unexplained_sum_amount": 0.0}],
    }


def test_redirected_tables_are_not_cut_at_80_columns():
    buf = io.StringIO()
    print_summary(Console(file=buf, markup=False), _summary())  # a file: not a terminal, rich's default 80 columns
    text = buf.getvalue()
    assert "…" not in text, text
    assert "step 41, watermark 2013-01-31T23:59:00Z, 744 of 744 files read" in text
    assert "too_late_sum_amount" in text and "unexplained_sum_amount" in text
    assert max(len(line) for line in text.splitlines()) > 80


def test_plot_has_a_legend_even_with_one_cause():
    pdf = pd.DataFrame({"window_start": pd.to_datetime(["2013-01-01T00:00:00Z", "2013-01-01T01:00:00Z"]),
                        **{c: [0.0, 0.0] for c in CAUSES}, "unexplained": [0.0, 0.0]})
    pdf["too_late"] = [3.0, 5.0]
    fig = figure(pdf, "count")
    assert [t.name for t in fig.data] == ["too late"]
    assert fig.layout.showlegend is True and fig.layout.legend.title.text == "cause"
