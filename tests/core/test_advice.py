"""The lateness advice, the what-if report and plots, on hand-made grids (no Spark)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from lowwater.advisor.advice import advise, choose, nothing_fired
from lowwater.advisor.plot import label_groups, plot
from lowwater.report import print_delays, print_whatif


def row(bound, grace=0.0, *, completeness=0.99, mean=None, p99=None, fired=10, drain_only=2, rows=1000, dead=0):
    """One result dict of the replay (lowwater.advisor.sweep.FIELDS); latencies default to L + 1s and L + 2s."""
    if fired:
        mean = bound + 1 if mean is None else mean
        p99 = bound + 2 if p99 is None else p99
    valid = rows - dead
    on_time = round(completeness * valid)
    return {
        "lateness": float(bound), "allowed_lateness": float(grace), "rows": rows, "on_time": on_time,
        "late_updates": 0, "too_late": valid - on_time, "dead_letter": dead, "completeness": completeness,
        "windows_fired": fired, "windows_drain_only": drain_only, "emit_latency_mean": mean if fired else None,
        "emit_latency_p99": p99 if fired else None, "peak_open_windows": 7, "too_late_by_partition": {},
    }


def grid(lag_mean, lag_p99):
    """L = 0, 5, 20 (G = 0): completeness grows with L; latency is L plus the watermark's own lag."""
    return [row(b, completeness=c, mean=b + lag_mean, p99=b + lag_p99)
            for b, c in ((0, 0.97), (5, 0.99), (20, 0.9995))]


def test_smallest_l_meeting_the_targets():
    text = advise(grid(1, 3), 0.98, 10.0)
    assert text.startswith("Smallest L meeting completeness >= 98.0000% and p99 emit latency <= 10s: L=5s (G=0s)")
    assert "p99 emit latency 8s" in text and "None" not in text
    assert choose(grid(1, 3), 0.98, 10.0)["lateness"] == 5.0


def test_latency_budget_missed_because_of_idleness_does_not_ask_for_a_larger_l():
    # The average lag fits a 12s budget, the tail (35s) does not, and idle_timeout = 30s.
    text = advise(grid(3, 35), None, 12.0, idle_timeout_s=30.0)
    assert text.startswith("No candidate meets p99 emit latency <= 12s.")
    assert "Idleness dominates" in text and "idle_timeout = 30s" in text
    assert "a larger L cannot help" in text and "try larger L" not in text
    assert "lag is 3s on average and 35s at p99" in text


def test_latency_budget_missed_because_a_partition_trails():
    text = advise(grid(21, 30), None, 12.0, idle_timeout_s=30.0)
    assert "A steady lag dominates" in text and "skew" in text and "a larger L cannot help" in text
    assert "Idleness dominates" not in text


def test_completeness_missed_asks_for_larger_l_or_g():
    text = advise(grid(1, 2), 0.9999, None)
    assert "No candidate meets completeness >= 99.9900%" in text
    assert "best is 99.9500% at L=20s, G=0s" in text and "try larger L or G" in text


def test_conflicting_targets_are_named():
    text = advise(grid(1, 2), 0.999, 10.0)
    assert "The targets conflict" in text and "needs L=20s, G=0s (p99 emit latency 22s)" in text
    assert "best completeness is 99.0000% at L=5s, G=0s" in text


def test_nothing_fired_says_so_instead_of_recommending_l_0():
    results = [row(b, completeness=1.0, fired=0, drain_only=4) for b in (0, 5)]
    for text in (advise(results, 0.99, None), advise(results, None, 10.0), nothing_fired(results)):
        assert text.startswith("No window fired before the end of the log for any L (4 would fire only on a drain)")
        assert "L=0s" not in text and "None" not in text
    assert choose(results, 0.99, None) is None


def test_a_pair_where_nothing_fired_is_never_chosen():
    results = [row(0, completeness=0.9), row(60, completeness=1.0, fired=0)]
    text = advise(results, 0.95, None)
    assert text.startswith("No candidate meets completeness >= 95.0000%.")
    assert "fire no window before the end of the log" in text and "None" not in text


def test_only_dead_letters():
    assert advise([row(0, fired=0, rows=3, dead=3)], 0.9, None).startswith("The log has no valid rows (3 rows")


def test_report_prints_dashes_not_none_and_full_width_when_piped():
    buf = io.StringIO()
    console = Console(file=buf)  # not a terminal: rich would default to 80 columns
    results = [row(0, fired=0), *grid(1, 2)]
    print_whatif(console, results)
    print_delays(console, [{"partition": "0", "rows": 1, "p50": 0.1, "p90": 0.2, "p99": 0.3, "p99_9": 0.4,
                            "max": 0.5, "longest_gap": None, "skew": 0.0}])
    text = buf.getvalue()
    assert "None" not in text and "…" not in text
    assert max(len(line) for line in text.splitlines()) > 100  # the whole table, not cut to 80 columns
    assert "latency -: no window fired before the end of the log" in text
    assert "no partition has two arrivals" in text


# -- plots ------------------------------------------------------------------------------------------------------


def test_close_points_share_one_label():
    pts = [(10.0, 0.970, "L=0s"), (10.1, 0.971, "L=2s"), (30.0, 0.999, "L=20s")]
    assert label_groups(pts) == [(10.0, 0.970, "L=0s, L=2s"), (30.0, 0.999, "L=20s")]


def test_png_and_html_plots(tmp_path):
    results = grid(1, 3) + [row(b, 10.0, completeness=0.995, mean=b + 1, p99=b + 3) for b in (0, 5)]
    png = tmp_path / "grid.png"
    plot(results, str(png), target_completeness=0.98, latency_budget_s=10.0)
    assert png.stat().st_size > 20_000
    for name in ("a.html", "b.html"):
        plot(results, str(tmp_path / name), target_completeness=0.98, latency_budget_s=10.0)
    for name in ("a.html", "b.html"):
        html = (tmp_path / name).read_text()
        assert len(html) < 100_000  # plotly.js (~4.8 MB) is not embedded ...
        assert 'src="plotly.min.js"' in html
        assert "chosen: L=0s G=10s" in html and "budget 10s" in html and "target 98.0000%" in html
    # ... but written once, next to the HTML files, and shared.
    assert [p.name for p in tmp_path.glob("*.js")] == ["plotly.min.js"]
    assert (tmp_path / "plotly.min.js").stat().st_size > 1_000_000


@pytest.mark.parametrize("suffix", ["png", "html"])
def test_nothing_fired_plot_says_so(tmp_path, suffix):
    path = tmp_path / f"grid.{suffix}"
    plot([row(b, completeness=1.0, fired=0) for b in (0, 5)], str(path), target_completeness=0.99)
    assert path.stat().st_size > 5_000
    if suffix == "html":
        assert "No window fired before the end of the log" in path.read_text()
