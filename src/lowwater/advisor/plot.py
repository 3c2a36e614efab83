"""The what-if grid as a picture: what each L (and G) costs in latency and buys in completeness.

Two panels share the x axis, p99 emit latency (the figure a latency budget is
checked against): completeness, and too-late rows. One curve per grace G, one
point per bound L. The completeness target and the latency budget are drawn
as dashed lines and the pair the advice chose as a star. Points too close to
label apart share one label (``L=0s, L=2s``). A pair where no window fired has no
latency: it is listed under the plot, not drawn; when nothing fired at all the
figure says so instead of drawing empty axes. ``--compare`` strategies are
diamonds, labelled as written.

PNG goes through matplotlib; HTML through plotly, with ``plotly.min.js``
written once next to the HTML files (``include_plotlyjs="directory"``) rather
than embedded (4.8 MB) in each.
"""

from __future__ import annotations

from lowwater.advisor.advice import choose, nothing_fired

PANELS = (("completeness", "completeness"), ("too_late", "too-late rows"))
X_LABEL = "p99 emit latency (s, event time)"
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
    return [(x, y, ", ".join(labels)) for x, y, labels in groups]


def _labels(results: list[dict], key: str) -> list[tuple[float, float, str]]:
    """One label per drawn point of a panel, across all G curves (so curves' labels do not overlap either)."""
    multi_g = len({r["allowed_lateness"] for r in results}) > 1
    return label_groups([
        (r["emit_latency_p99"], r[key], f"L={r['lateness']:g}s" + (f" G={r['allowed_lateness']:g}s" if multi_g else ""))
        for pts in _curves(results).values() for r in pts
    ])


def _curves(results: list[dict]) -> dict[float, list[dict]]:
    graces = sorted({r["allowed_lateness"] for r in results})
    return {
        g: sorted((r for r in results if r["allowed_lateness"] == g and r["emit_latency_p99"] is not None),
                  key=lambda r: r["lateness"])
        for g in graces
    }


def _footnote(results: list[dict]) -> str:
    silent = [f"L={r['lateness']:g}s G={r['allowed_lateness']:g}s" for r in results if r["emit_latency_p99"] is None]
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
    return [{**r, "label": r["strategy"] + (f" G={r['allowed_lateness']:g}s" if multi_g else "")} for r in rows]


def _plotly(results, path, target, budget, chosen, empty, compared) -> None:  # noqa: ANN001, PLR0913
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=[t for _, t in PANELS])
    title = "lowwater what-if: lateness bound L vs completeness and latency"
    if empty is not None:
        fig.add_annotation(text=empty, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, width=900)
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
    for col, (key, _) in enumerate(PANELS, start=1):
        if empty is not None:
            break
        for g, pts in _curves(results).items():
            fig.add_trace(go.Scatter(
                x=[r["emit_latency_p99"] for r in pts], y=[r[key] for r in pts], mode="lines+markers",
                name=f"G={g:g}s", legendgroup=f"G={g:g}s", showlegend=col == 1,
                hovertext=[f"L={r['lateness']:g}s G={g:g}s" for r in pts], hoverinfo="text+x+y",
            ), row=1, col=col)
        for r in compared:
            fig.add_trace(go.Scatter(
                x=[r["emit_latency_p99"]], y=[r[key]], mode="markers+text", text=[r["label"]],
                textposition="bottom center", marker={"symbol": "diamond", "size": 11}, name=r["label"],
                legendgroup=r["label"], showlegend=col == 1,
            ), row=1, col=col)
        for x, y, label in _labels(results, key):
            fig.add_annotation(x=x, y=y, text=label, showarrow=False, yshift=10, font={"size": 10}, row=1, col=col)
        if budget is not None:
            fig.add_vline(x=budget, line_dash="dash", line_color="firebrick", row=1, col=col,
                          annotation_text=f"budget {budget:g}s" if col == 1 else None)
        if target is not None and key == "completeness":
            fig.add_hline(y=target, line_dash="dash", line_color="seagreen", row=1, col=col,
                          annotation_text=f"target {target:.4%}")
        if chosen is not None:
            fig.add_trace(go.Scatter(
                x=[chosen["emit_latency_p99"]], y=[chosen[key]], mode="markers",
                marker={"symbol": "star", "size": 16, "color": "gold", "line": {"width": 1, "color": "black"}},
                name=f"chosen: L={chosen['lateness']:g}s G={chosen['allowed_lateness']:g}s", showlegend=col == 1,
            ), row=1, col=col)
    if empty is None:
        fig.update_xaxes(title_text=X_LABEL)
        fig.update_yaxes(tickformat=".2%", row=1, col=1)
    note = _footnote(results) if empty is None else ""
    fig.update_layout(title=title + (f"<br><sup>{note}</sup>" if note else ""))
    fig.write_html(path, include_plotlyjs="directory")


def _matplotlib(results, path, target, budget, chosen, empty, compared) -> None:  # noqa: ANN001, PLR0913
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import PercentFormatter

    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    fig.suptitle("lowwater what-if: lateness bound L vs completeness and latency")
    if empty is not None:
        for ax in axes:
            ax.set_axis_off()
        fig.text(0.5, 0.5, empty, ha="center", va="center", wrap=True, fontsize=11)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return
    for ax, (key, ylabel) in zip(axes, PANELS, strict=True):
        for g, pts in _curves(results).items():
            x = [r["emit_latency_p99"] for r in pts]
            ax.plot(x, [r[key] for r in pts], marker="o", label=f"G={g:g}s")
        for r in compared:
            ax.plot([r["emit_latency_p99"]], [r[key]], marker="D", linestyle="none", label=r["label"])
        for lx, ly, label in _labels(results, key):
            ax.annotate(label, (lx, ly), fontsize=7, xytext=(4, 4), textcoords="offset points")
        if budget is not None:
            ax.axvline(budget, linestyle="--", color="firebrick", label=f"budget {budget:g}s")
        if target is not None and key == "completeness":
            ax.axhline(target, linestyle="--", color="seagreen", label=f"target {target:.4%}")
        if chosen is not None:
            ax.plot([chosen["emit_latency_p99"]], [chosen[key]], marker="*", markersize=16, color="gold",
                    markeredgecolor="black", linestyle="none",
                    label=f"chosen: L={chosen['lateness']:g}s G={chosen['allowed_lateness']:g}s")
        ax.margins(x=0.15, y=0.08)  # room for the labels of the outermost points
        ax.set_xlabel(X_LABEL)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].yaxis.set_major_formatter(PercentFormatter(1.0, decimals=2))
    note = _footnote(results)
    if note:
        fig.text(0.01, 0.01, note, fontsize=8)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
