"""The lateness advice, the what-if report and plots, on hand-made grids (no Spark)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from lowwater.advisor.advice import advise, choose, delay_advice, nothing_fired
from lowwater.advisor.plot import duration_ticks, label_groups, plot, plotly_figure
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
                            "max": 0.5, "ooo_p50": 0.0, "ooo_p90": 0.0, "ooo_p99": 0.0, "ooo_p99_9": 0.0,
                            "ooo_max": 0.0, "longest_gap": None, "skew": 0.0}])
    text = buf.getvalue()
    assert "None" not in text and "…" not in text
    assert max(len(line) for line in text.splitlines()) > 100  # the whole table, not cut to 80 columns
    assert "latency -: no window fired before the end of the log" in text
    assert "no partition has two arrivals" in text


def test_durations_print_as_users_write_them():
    """An 11 h bound and a 30 m grace, as the flights log needs: never ``39600s`` or ``40380.000``."""
    h = 3600.0
    results = [row(11 * h, 1800.0, mean=11 * h + 60, p99=11 * h + 13 * 60), row(90 * 60, 0.0, fired=0)]
    buf = io.StringIO()
    print_whatif(Console(file=buf), results)
    text = buf.getvalue()
    assert "11h" in text and "30m" in text and "11h 1m" in text and "11h 13m" in text and "1h 30m" in text
    assert "39600" not in text and "1800" not in text
    advice = advise(results, 0.9, 12 * h)
    assert "L=11h (G=30m)" in advice and "p99 emit latency <= 12h" in advice and "L=1h 30m, G=0s" in advice


def _profile(partition, delay_p99_9, behind_p99_9, skew=0.0, gap=120.0):
    return {"partition": partition, "rows": 1000, "p50": 60.0, "p90": 600.0, "p99": delay_p99_9 - 1,
            "p99_9": delay_p99_9, "max": delay_p99_9 + 1, "ooo_p50": 0.0, "ooo_p90": 10.0, "ooo_p99": behind_p99_9 - 1,
            "ooo_p99_9": behind_p99_9, "ooo_max": behind_p99_9 + 1, "longest_gap": gap, "skew": skew}


def test_delay_advice_is_the_out_of_orderness_not_the_arrival_delay():
    """A flight reported when it lands: its arrival delay is hours more than how far it is behind on its partition."""
    profile = [_profile("EWR", 12 * 3600 + 1700, 11 * 3600 + 600, skew=0.0),
               _profile("HNL", 100.0, 40.0, skew=1800.0)]
    text = delay_advice(profile)
    assert text.startswith("L for 99.9% of rows on their own partition: ~11h 10m (out-of-orderness, partition EWR")
    assert "arrival delay p99.9 is ~12h 28m 20s, not what L covers" in text
    assert "partition HNL trails the fastest by 30m (median); longest silence 2m" in text
    buf = io.StringIO()
    print_delays(Console(file=buf), profile)
    table = buf.getvalue()
    assert "behind p99.9" in table and "arrival p99.9" in table and "11h 10m" in table and "12h 28m 20s" in table


def test_summary_styles_are_not_printed_as_markup():
    """The summary console prints text as it is (markup off): styled rows are Text, never ``[yellow]...[/]``."""
    from lowwater.cli.app import out
    from lowwater.report import print_summary

    out.file = io.StringIO()

    summary = {"rows": 10, "on_time": 10, "late_updates": 0, "too_late": 0, "dead_letter": 0, "windows_fired": 1,
               "revisions": 0, "out_of_order_files": 1, "out_of_order_rows": 3, "arrival_regressions": 2,
               "held_rows": 4, "completeness": 1.0, "final_watermark": None, "balanced": True}
    for console in (Console(file=io.StringIO(), markup=False), Console(file=io.StringIO(), markup=True)):
        print_summary(console, summary, "out")
        text = console.file.getvalue()
        assert "[yellow]" not in text and "[/]" not in text, text
        assert "steps out of arrival order" in text and "read out of name order" in text
        assert "held (not yet judged)" in text
    print_summary(out, summary, "out")  # the CLI's own console (markup off), as `lowwater run --once` prints
    text = out.file.getvalue()
    out.file = None
    assert "[yellow]" not in text and "steps out of arrival order" in text, text


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


def test_html_plot_colours_match_the_legend_in_both_panels():
    """Each curve / strategy has one colour in both panels; no unlabelled annotation (plotly's "new text")."""
    h = 3600.0
    results = [row(b * h, g, completeness=c, mean=b * h + 60, p99=b * h + 600)
               for g in (0.0, 1800.0) for b, c in ((0, 0.9), (1, 0.95), (4, 0.99), (11, 0.9999))]
    compared = [{**row(5 * h, completeness=0.992, p99=5.5 * h), "strategy": "adaptive", "lateness": None,
                 "label": "adaptive"}]
    fig = plotly_figure(results, 0.99, 10 * h, choose(results, 0.99, 10 * h), None, compared)
    colours: dict[str, set] = {}
    for trace in fig.data:
        if trace.legendgroup != "chosen":
            colours.setdefault(trace.legendgroup, set()).add(trace.marker.color)
    assert len(colours) == 3 and all(len(c) == 1 for c in colours.values()), colours
    assert len({next(iter(c)) for c in colours.values()}) == 3  # and three different colours
    texts = [a.text for a in fig.layout.annotations]
    assert all(texts) and "new text" not in texts
    assert texts.count("budget 10h") == 2 and "L=11h" in texts and "L=0s" in texts  # L once per near group
    assert [t for t in fig.layout.xaxis.ticktext][:3] == ["0s", "2h", "4h"]


def test_duration_ticks_are_round():
    assert duration_ticks(0, 41_000) == [0, 7200, 14400, 21600, 28800, 36000, 43200]
    assert duration_ticks(0.5, 3.0) == [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]


@pytest.mark.parametrize("suffix", ["png", "html"])
def test_nothing_fired_plot_says_so(tmp_path, suffix):
    path = tmp_path / f"grid.{suffix}"
    plot([row(b, completeness=1.0, fired=0) for b in (0, 5)], str(path), target_completeness=0.99)
    assert path.stat().st_size > 5_000
    if suffix == "html":
        assert "No window fired before the end of the log" in path.read_text()
