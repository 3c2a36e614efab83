"""``python -m bench.report``: docs/performance.md's table of current figures, from ``bench/results/*.jsonl``.

``ab.jsonl`` is left out: its lines are the sides of interleaved before/after runs (``bench/ab.py``),
evidence for a change, not the project's current figures. The newest line per case wins (by ``date``;
on equal dates the later line). The table is written between ``<!-- results:begin -->`` and
``<!-- results:end -->``; ``--check`` only says whether the committed table is the generated one
(exit 1 if not).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.results import RESULTS

DOC = Path(__file__).resolve().parent.parent / "docs" / "performance.md"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
NOT_CURRENT = frozenset({"ab.jsonl"})  # before/after sides, kept as data (see the module's docstring)

# How a figure's key reads in the table; a key not listed reads with spaces for underscores.
LABELS = {
    "native_eps": "native ev/s",
    "lowwater_eps": "lowwater ev/s",
    "ratio": "ratio",
    "step_s_median": "lowwater step median s",
    "peak_state": "peak state",
    "required_peak": "required peak state",
    "native_peak": "native peak state",
    "lowwater_peak": "lowwater peak state",
    "latency_median_intervals": "latency median (intervals)",
    "latency_p90_intervals": "p90",
    "latency_max_intervals": "max",
    "baseline_s": "baseline s",
    "sweep_s": "sweep s",
    "baseline_median_s": "baseline median s",
    "reconcile_median_s": "reconcile median s",
    "ratio_first": "ratio, first run",
    "ratio_median": "ratio, medians",
    "rows_per_s_off": "rows/s off",
    "rows_per_s_on": "rows/s on",
    "on_over_off": "on/off",
    "native_runs_eps": "native runs ev/s",
    "lowwater_runs_eps": "lowwater runs ev/s",
    "runs_off_on": "runs off/on",
    "lowwater_rows_per_s": "lowwater rows/s",
    "native_batch_rows_per_s": "native batch rows/s",
    "windows_differing": "differing",
    "bound_rows": "bound (rows)",
}


def load(directory: Path = RESULTS) -> list[dict[str, Any]]:
    """Every line of every ``*.jsonl`` in ``directory``, files in name order, lines in file order."""
    lines = []
    for path in sorted(directory.glob("*.jsonl")):
        if path.name in NOT_CURRENT:
            continue
        for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if text.strip():
                try:
                    lines.append(json.loads(text))
                except json.JSONDecodeError as e:
                    msg = f"{path}:{n}: not a JSON line ({e})"
                    raise SystemExit(msg) from None
    return lines


def newest(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The newest line of each case, cases in the order they first appear."""
    best: dict[str, dict[str, Any]] = {}
    for ln in lines:
        case = ln["case"]
        if case not in best or str(ln.get("date") or "") >= str(best[case].get("date") or ""):
            best[case] = ln
    return list(best.values())


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:g}"
    if isinstance(v, list):
        return " / ".join(_value(x) for x in v)
    return str(v)


def figures(f: dict[str, Any]) -> str:
    """``label value; label value`` in the line's own order."""
    return "; ".join(f"{LABELS.get(k, k.replace('_', ' '))} {_value(v)}" for k, v in f.items())


def _cell(text: Any) -> str:
    return "" if text is None else _value(text).replace("|", "\\|").replace("\n", " ")


def table(lines: list[dict[str, Any]]) -> str:
    """The markdown table of the newest line per case."""
    out = ["| case | figures | measured at | commit | load | machine | command |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for ln in newest(lines):
        out.append("| " + " | ".join([
            _cell(ln["case"]), _cell(figures(ln.get("figures", {}))), _cell(ln.get("date")),
            _cell(ln.get("commit")), _cell(ln.get("load")), _cell(ln.get("machine")), _cell(ln.get("command")),
        ]) + " |")
    return "\n".join(out) + "\n"


def render(doc: str, generated: str) -> str:
    """``doc`` with the text between the markers replaced by ``generated``."""
    start, stop = doc.find(BEGIN), doc.find(END)
    if start < 0 or stop < start:
        msg = f"docs/performance.md: the markers {BEGIN} ... {END} are missing"
        raise SystemExit(msg)
    return doc[: start + len(BEGIN)] + "\n" + generated + doc[stop:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=RESULTS, help="the directory of *.jsonl (bench/results)")
    ap.add_argument("--doc", type=Path, default=DOC, help="the document to update (docs/performance.md)")
    ap.add_argument("--check", action="store_true", help="exit 1 if the document's table is not the generated one")
    args = ap.parse_args(argv)
    doc = args.doc.read_text(encoding="utf-8")
    updated = render(doc, table(load(args.results)))
    if args.check:
        if updated != doc:
            print(f"{args.doc}: the results table is stale; run python -m bench.report", file=sys.stderr)
            return 1
        return 0
    if updated != doc:
        args.doc.write_text(updated, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
