"""The dashboard: a page that shows a run's ``metrics/``, ``alerts/`` and latest results, live or finished.

Why no web framework: the page needs three routes (the page, plotly.js, the
run as JSON), which the standard library's ``ThreadingHTTPServer`` serves in
a few lines, with no new dependency and nothing that reaches the internet.
plotly.js comes from the installed ``plotly`` wheel (``package_data``), so
the page works offline. The page polls ``/api/run`` every two seconds and
redraws with ``Plotly.react``; it reads the outputs, never the engine, so
``lowwater dashboard OUT`` shows a running or a finished run the same way.

:func:`write_report` writes the same page as one self-contained file
(``<output>/report.html``: plotly.js and the data inlined, no refresh).
Only local output paths are read (the outputs of a remote path are read by
Spark, not here).

The page names the pipeline (``[observe] pipeline`` when the run serves it,
else the ``pipeline`` its alerts carry, else the output path), says whether a
run holds the output path now (its lock, ``io/lock.py``: "live") or not
("finished"), and shows an alert as firing only while it has not resolved.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Mapping
from datetime import datetime
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from lowwater.io.lock import run_in_progress
from lowwater.observe.model import input_rate, late_rate

log = logging.getLogger("lowwater")

RESULTS_SHOWN = 20  # rows of the latest results shown
DRAINED_YEAR = 2262  # W = +inf (a drain) is the largest timestamp in metrics/: not plotted, said in the status


@cache
def plotly_js() -> bytes:
    """plotly.min.js as shipped inside the plotly wheel."""
    return (files("plotly") / "package_data" / "plotly.min.js").read_bytes()


def _page() -> str:
    return (Path(__file__).parent / "dashboard.html").read_text()


def _plain(v: Any) -> Any:
    """A Parquet value as JSON: timestamps as ISO text, maps (lists of pairs) as objects, NaN as null."""
    if isinstance(v, datetime):
        return v.isoformat().replace("+00:00", "Z")
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, list) and v and all(isinstance(x, tuple) and len(x) == 2 for x in v):
        return {str(k): _plain(x) for k, x in v}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if isinstance(v, int | float | str | bool) or v is None:
        return v
    return str(v)


def _steps(root: Path, kind: str) -> list[tuple[int, Path]]:
    out = []
    for d in (root / kind).glob("batch_id=*"):
        try:
            step = int(d.name.split("=", 1)[1])
        except ValueError:
            continue
        if step >= 0:
            out.append((step, d))
    return sorted(out)


def _read(d: Path) -> list[dict]:
    """A step's rows; [] while the step is being (re)written."""
    try:
        return pq.read_table(d).to_pylist()
    except Exception:  # noqa: BLE001 - a directory caught mid-write: read it on the next poll
        return []


class RunReader:
    """Reads a run's outputs under a local ``output_path``; steps already read are cached (a poll reads new ones)."""

    def __init__(self, output_path: str | Path, pipeline: str | None = None) -> None:
        self.root = Path(output_path)
        self.pipeline = pipeline
        self._metrics: dict[int, dict] = {}
        self._lock = threading.Lock()

    def metrics(self) -> list[dict]:
        """Every step's metrics row (plain JSON values) with ``step``, ``late_rate`` and ``input_rows_per_s``."""
        with self._lock:
            for step, d in _steps(self.root, "metrics"):
                if step in self._metrics:
                    continue
                rows = _read(d)
                if rows:
                    row = rows[0]
                    w = row.get("low_watermark")
                    drained = w is not None and w.year >= DRAINED_YEAR
                    hidden = dict.fromkeys(("low_watermark", "watermark_lag_s", "output_watermark")) if drained else {}
                    self._metrics[step] = {k: _plain(v) for k, v in row.items()} | {
                        "step": step, "late_rate": late_rate(row), "input_rows_per_s": input_rate(row),
                        "drained": drained} | hidden
            return [self._metrics[s] for s in sorted(self._metrics)]

    def alerts(self) -> list[dict]:
        """Every firing and resolving, oldest first; ``firing_now``: the rule's latest event is this firing one."""
        rows = [{k: _plain(v) for k, v in r.items()} for _, d in _steps(self.root, "alerts") for r in _read(d)]
        last: dict[str, int] = {}
        for i, r in enumerate(rows):
            last[r.get("rule")] = i
        for i, r in enumerate(rows):
            r["firing_now"] = r.get("state") == "firing" and last[r.get("rule")] == i
            if r.get("state") == "firing" and not r["firing_now"]:
                later = next((x for x in rows[i + 1:] if x.get("rule") == r.get("rule")
                              and x.get("state") != "firing"), None)
                r["resolved_step"] = None if later is None else later.get("step")
        return rows

    def latest_results(self) -> dict:
        """The newest step with results: its step and first rows (the latest emitted windows and revisions)."""
        for step, d in reversed(_steps(self.root, "results")):
            rows = _read(d)
            if rows:
                return {"step": step, "rows": [{k: _plain(v) for k, v in r.items()} for r in rows[:RESULTS_SHOWN]]}
        return {"step": None, "rows": []}

    def snapshot(self) -> dict:
        """Everything the page shows, as one JSON-able dict."""
        alerts = self.alerts()
        named = self.pipeline or next((a["pipeline"] for a in alerts if a.get("pipeline")), None)
        return {"output": str(self.root), "pipeline": named, "running": run_in_progress(str(self.root)),
                "metrics": self.metrics(), "alerts": alerts, "results": self.latest_results()}


def render(snapshot: Mapping[str, Any] | None, inline_js: bool) -> str:
    """The page: live (polls ``/api/run``) or a static report (``snapshot`` and plotly.js inlined)."""
    page = _page()
    if inline_js:
        script = "<script>" + plotly_js().decode() + "</script>"
    else:
        script = '<script src="/plotly.min.js"></script>'
    data = "null" if snapshot is None else json.dumps(snapshot).replace("</", "<\\/")
    return page.replace("<!--PLOTLY-->", script).replace("/*DATA*/null", data)


def write_report(output_path: str | Path, pipeline: str | None = None) -> Path:
    """Write ``<output_path>/report.html``: the dashboard of the run as it is now, self-contained."""
    target = Path(output_path) / "report.html"
    tmp = target.with_suffix(".html.tmp")
    tmp.write_text(render(RunReader(output_path, pipeline).snapshot(), inline_js=True))
    tmp.replace(target)
    return target


class Dashboard:
    """Serves the dashboard of ``output_path`` on ``host:port`` (0: a free port) from a daemon thread."""

    def __init__(self, output_path: str | Path, port: int = 8050, host: str = "127.0.0.1",
                 pipeline: str | None = None) -> None:
        reader = RunReader(output_path, pipeline)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                if path == "/":
                    body, kind = render(None, inline_js=False).encode(), "text/html; charset=utf-8"
                elif path == "/plotly.min.js":
                    body, kind = plotly_js(), "application/javascript"
                elif path == "/api/run":
                    body, kind = json.dumps(reader.snapshot()).encode(), "application/json"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:  # requests are not news
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.host, self.port = host, self.server.server_port
        self._thread = threading.Thread(target=self.server.serve_forever, name="lowwater-dashboard", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def close(self) -> None:
        """Stop serving (idempotent)."""
        if self._thread.is_alive():
            self.server.shutdown()
        self.server.server_close()
