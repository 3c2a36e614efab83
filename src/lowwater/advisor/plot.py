"""The what-if grid as a picture: what each L (and G) costs in latency and buys in completeness.

Two panels share the x axis, p99 emit latency (the figure a latency budget is
checked against): completeness, and too-late rows. One curve per grace G, one
point per bound L. The completeness target and the latency budget are drawn
as dashed lines and the pair the advice chose as a star. Points too close to
label apart share one label (``L=0s, L=2s``); a point is labelled with its L
only (its curve's colour and the legend say its G). A pair where no window
fired has no latency: it is listed under the plot, not drawn; when nothing
fired at all the figure says so instead of drawing empty axes. ``--compare``
strategies are diamonds, named in the legend. Each curve and strategy keeps
one colour in both panels and the legend; durations (ticks, labels, legend)
are written as users write them (``1h 30m``).

PNG goes through matplotlib; HTML through plotly, with ``plotly.min.js``
written once next to the HTML files (``include_plotlyjs="directory"``) rather
than embedded (4.8 MB) in each.
"""

from __future__ import annotations

from lowwater.advisor.advice import choose, lg, nothing_fired, secs

PANELS = (("completeness", "completeness"), ("too_late", "too-late rows"))
X_LABEL = "p99 emit latency (event time)"
# One colour per curve, then per compared strategy (matplotlib's tab10, which plotly's default also starts with).
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
# Tick steps for a duration axis (seconds): the first that gives at most 7 ticks.
_STEPS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800,
          3600, 7200, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400)
# Labels closer than this (fraction of the axis span) are merged into one.
_NEAR_X, _NEAR_Y = 0.08, 0.06


def label_groups(points: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """Merge the labels of points that would overlap: ``(x, y, label)`` at the first point of each group."""
    if not points:
        return []
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    dx, dy = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0
    groups: list[list] = []
    for x, y, label in points:
        for g in groups:
            if abs(x - g[0]) / dx < _NEAR_X and abs(y - g[1]) / dy < _NEAR_Y:
                g[2].append(label)
                break
        else:
            groups.append([x, y, [label]])
    return [(x, y, ", ".join(dict.fromkeys(labels))) for x, y, labels in groups]  # each label once


def _labels(results: list[dict], key: str) -> list[tuple[float, float, str]]:
    """One label per group of near points of a panel, across all G curves (their colours tell the G apart)."""
    return label_groups([
        (r["emit_latency_p99"], r[key], f"L={secs(r['lateness'])}") for pts in _curves(results).values() for r in pts
    ])


def duration_ticks(lo: float, hi: float) -> list[float]:
    """Tick positions (seconds) at a round duration step covering ``[lo, hi]``: at most 7 of them."""
    lo, hi = max(lo, 0.0), max(hi, 0.0)
    span = (hi - lo) or max(hi, 1.0)
    step = next((s for s in _STEPS if span / s <= 6), _STEPS[-1])
    first = int(lo // step)
    return [round(i * step, 6) for i in range(first, int(hi // step) + 2)]


def _curves(results: list[dict]) -> dict[float, list[dict]]:
    graces = sorted({r["allowed_lateness"] for r in results})
    return {
        g: sorted((r for r in results if r["allowed_lateness"] == g and r["emit_latency_p99"] is not None),
                  key=lambda r: r["lateness"])
        for g in graces
    }


def _footnote(results: list[dict]) -> str:
    silent = [lg(r, " ") for r in results if r["emit_latency_p99"] is None]
    return f"not drawn, no window fired: {', '.join(silent)}" if silent else ""


def plot(
    results: list[dict],
    path: str,
    target_completeness: float | None = None,
    latency_budget_s: float | None = None,
    compared: list[dict] | None = None,
) -> None:
    """Write the grid (and the ``--compare`` rows, as diamonds) to ``path`` (``.png`` or ``.html``)."""
    chosen = None
    if target_completeness is not None or latency_budget_s is not None:
        chosen = choose(results, target_completeness, latency_budget_s)
    empty = nothing_fired(results)
    if path.endswith(".html"):
        _plotly(results, path, target_completeness, latency_budget_s, chosen, empty, _drawn(compared))
    else:
        _matplotlib(results, path, target_completeness, latency_budget_s, chosen, empty, _drawn(compared))


def _drawn(compared: list[dict] | None) -> list[dict]:
    """Compared strategies with a latency (something fired), labelled with their G when there are several."""
    rows = [r for r in compared or [] if r["emit_latency_p99"] is not None]
    multi_g = len({r["allowed_lateness"] for r in rows}) > 1
    return [{**r, "label": r["strategy"] + (f" G={secs(r['allowed_lateness'])}" if multi_g else "")} for r in rows]


def _xs(results: list[dict], compared: list[dict], chosen: dict | None) -> list[float]:
    """Every drawn latency (for the ticks)."""
    xs = [r["emit_latency_p99"] for pts in _curves(results).values() for r in pts]
    return xs + [r["emit_latency_p99"] for r in compared] + ([chosen["emit_latency_p99"]] if chosen else [])


def _plotly(results, path, target, budget, chosen, empty, compared) -> None:  # noqa: ANN001, PLR0913
    plotly_figure(results, target, budget, chosen, empty, compared).write_html(path, include_plotlyjs="directory")


def plotly_figure(results, target, budget, chosen, empty, compared):  # noqa: ANN001, ANN201, PLR0913
    """The HTML figure (a ``plotly.graph_objects.Figure``): one trace per curve/strategy and panel."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=[t for _, t in PANELS])
    title = "lowwater what-if: lateness bound L vs completeness and latency"
    if empty is not None:
        fig.add_annotation(text=empty, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, width=900)
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
    curves = _curves(results)
    for col, (key, _) in enumerate(PANELS, start=1):
        if empty is not None:
            break
        for i, (g, pts) in enumerate(curves.items()):
            fig.add_trace(go.Scatter(
                x=[r["emit_latency_p99"] for r in pts], y=[r[key] for r in pts], mode="lines+markers",
                name=f"G={secs(g)}", legendgroup=f"G={g:g}", showlegend=col == 1,
                line={"color": COLOURS[i % len(COLOURS)]}, marker={"color": COLOURS[i % len(COLOURS)]},
                hovertext=[lg(r, " ") for r in pts], hoverinfo="text+y",
            ), row=1, col=col)
        for j, r in enumerate(compared, start=len(curves)):
            fig.add_trace(go.Scatter(
                x=[r["emit_latency_p99"]], y=[r[key]], mode="markers", hovertext=[r["label"]], hoverinfo="text+y",
                marker={"symbol": "diamond", "size": 11, "color": COLOURS[j % len(COLOURS)]}, name=r["label"],
                legendgroup=r["label"], showlegend=col == 1,
            ), row=1, col=col)
        for x, y, label in _labels(results, key):
            fig.add_annotation(x=x, y=y, text=label, showarrow=False, xanchor="left", xshift=6, yshift=8,
                               font={"size": 10}, row=1, col=col)
        if budget is not None:
            fig.add_vline(x=budget, line_dash="dash", line_color="firebrick", row=1, col=col)
            fig.add_annotation(x=budget, y=1, yref=f"y{'' if col == 1 else col} domain", text=f"budget {secs(budget)}",
                               showarrow=False, xanchor="left", yanchor="top", xshift=4, font={"color": "firebrick"},
                               row=1, col=col)
        if target is not None and key == "completeness":
            fig.add_hline(y=target, line_dash="dash", line_color="seagreen", row=1, col=col,
                          annotation_text=f"target {target:.4%}", annotation_position="bottom right")
        if chosen is not None:
            fig.add_trace(go.Scatter(
                x=[chosen["emit_latency_p99"]], y=[chosen[key]], mode="markers",
                marker={"symbol": "star", "size": 16, "color": "gold", "line": {"width": 1, "color": "black"}},
                name=f"chosen: {lg(chosen, ' ')}", showlegend=col == 1, legendgroup="chosen",
            ), row=1, col=col)
    if empty is None:
        xs = _xs(results, compared, chosen) + ([budget] if budget is not None else [])
        ticks = duration_ticks(min(xs), max(xs))
        fig.update_xaxes(title_text=X_LABEL, tickvals=ticks, ticktext=[secs(t) for t in ticks])
        fig.update_yaxes(tickformat=".2%", row=1, col=1)
    note = _footnote(results) if empty is None else ""
    fig.update_layout(title=title + (f"<br><sup>{note}</sup>" if note else ""))
    return fig


def _matplotlib(results, path, target, budget, chosen, empty, compared) -> None:  # noqa: ANN001, PLR0913
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, PercentFormatter

    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    fig.suptitle("lowwater what-if: lateness bound L vs completeness and latency")
    if empty is not None:
        for ax in axes:
            ax.set_axis_off()
        fig.text(0.5, 0.5, empty, ha="center", va="center", wrap=True, fontsize=11)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return
    curves = _curves(results)
    xs = _xs(results, compared, chosen) + ([budget] if budget is not None else [])
    ticks = duration_ticks(min(xs), max(xs))
    for ax, (key, ylabel) in zip(axes, PANELS, strict=True):
        for i, (g, pts) in enumerate(curves.items()):
            x = [r["emit_latency_p99"] for r in pts]
            ax.plot(x, [r[key] for r in pts], marker="o", color=COLOURS[i % len(COLOURS)], label=f"G={secs(g)}")
        for j, r in enumerate(compared, start=len(curves)):
            ax.plot([r["emit_latency_p99"]], [r[key]], marker="D", linestyle="none", color=COLOURS[j % len(COLOURS)],
                    label=r["label"])
        for lx, ly, label in _labels(results, key):
            ax.annotate(label, (lx, ly), fontsize=7, xytext=(5, 5), textcoords="offset points")
        if budget is not None:
            ax.axvline(budget, linestyle="--", color="firebrick", label=f"budget {secs(budget)}")
        if target is not None and key == "completeness":
            ax.axhline(target, linestyle="--", color="seagreen", label=f"target {target:.4%}")
        if chosen is not None:
            ax.plot([chosen["emit_latency_p99"]], [chosen[key]], marker="*", markersize=16, color="gold",
                    markeredgecolor="black", linestyle="none", label=f"chosen: {lg(chosen, ' ')}")
        ax.margins(x=0.15, y=0.08)  # room for the labels of the outermost points
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: secs(v)))
        ax.set_xlabel(X_LABEL)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].yaxis.set_major_formatter(PercentFormatter(1.0, decimals=2))
    handles, names = axes[0].get_legend_handles_labels()  # one legend for both panels, outside them
    fig.legend(handles, names, loc="center right", fontsize=8, frameon=False)
    note = _footnote(results)
    if note:
        fig.text(0.01, 0.01, note, fontsize=8)
    fig.tight_layout(rect=(0, 0.03, 0.82, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
