"""The Prometheus endpoint: the metrics model (``observe/model.py``) served with the official ``prometheus_client``.

One :class:`PrometheusExporter` per engine, with its own ``CollectorRegistry``
(never the process-wide default: two engines in one process, or the tests,
must not see each other's series). A custom collector renders the last step's
samples at scrape time, so a scrape never sees half a step: :meth:`on_step`
swaps one immutable snapshot in. Every series carries a ``pipeline`` label
(``[observe] pipeline``, default the output path).

A run that ends (``--once``, a batch job) is gone before a scrape would see
its last steps, so the same registry can also be written, after every
committed step, to a ``.prom`` file for node_exporter's textfile collector
(``[observe] prometheus_textfile``): what Prometheus recommends for batch
jobs on a host. It is written to a temporary file and renamed, so the
collector never reads half of it, and it stays after the run, with the last
step's values.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from lowwater.observe.model import FIGURES, Histogram, Sample, samples

log = logging.getLogger("lowwater")


class _StepCollector(Collector):
    """Renders the last step's samples, and the alert gauges, as metric families at scrape time."""

    def __init__(self, pipeline: str) -> None:
        self.pipeline = pipeline
        self.snapshot: tuple[list[Sample], Histogram] = ([], Histogram())
        self.alerts: dict[str, bool] = {}

    def collect(self) -> Iterator[Metric]:
        current, hist = self.snapshot
        by_name: dict[str, list[Sample]] = {}
        for s in current:
            by_name.setdefault(s.name, []).append(s)
        for f in FIGURES:
            labels = ["pipeline", *f.labels]
            if f.kind == "histogram":
                if hist.counts and sum(hist.counts):
                    fam = HistogramMetricFamily(f.name, f.help, labels=["pipeline"])
                    fam.add_metric([self.pipeline], hist.cumulative(), hist.total)
                    yield fam
                continue
            name = f.name.removesuffix("_total") if f.kind == "counter" else f.name
            fam = (CounterMetricFamily if f.kind == "counter" else GaugeMetricFamily)(name, f.help, labels=labels)
            for s in by_name.get(f.name, ()):
                fam.add_metric([self.pipeline, *(v for _, v in s.labels)], s.value)
            yield fam
        alert = GaugeMetricFamily("lowwater_alert_firing", "1 while the alert rule fires, else 0.",
                                  labels=["pipeline", "rule"])
        for rule, firing in sorted(self.alerts.items()):
            alert.add_metric([self.pipeline, rule], 1.0 if firing else 0.0)
        yield alert


class PrometheusExporter:
    """Serves ``/metrics`` on ``host:port`` (port 0: a free port, see :attr:`port`; None: no endpoint) until
    :meth:`close`, and/or rewrites ``textfile`` after every step."""

    def __init__(self, port: int | None, pipeline: str, host: str = "127.0.0.1", source: str = "",
                 several: bool = False, textfile: str | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._collector = _StepCollector(pipeline)
        self.registry.register(self._collector)
        self._hist = Histogram()
        self._lock = threading.Lock()
        self.source, self.several = source, several
        self.textfile = textfile
        self.host = host
        self._server = None
        self.port: int | None = None
        if port is not None:
            self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
            self.port = self._server.server_port
            log.info("Prometheus metrics on http://%s:%d/metrics", host, self.port)

    def on_step(self, step: int, row: Mapping[str, Any], totals: Mapping[str, int],
                alerts: Mapping[str, bool]) -> None:
        """Publish a committed step (its metrics row and the running totals after it)."""
        with self._lock:
            if row.get("duration_s") is not None:
                self._hist.observe(float(row["duration_s"]))
            hist = Histogram(self._hist.buckets, list(self._hist.counts), self._hist.total)
            self._collector.snapshot = (samples(row, totals, self.source, self.several), hist)
            self._collector.alerts = dict(alerts)
            if self.textfile is not None:  # a temporary file renamed over it: never read half-written
                write_to_textfile(self.textfile, self.registry)

    def close(self) -> None:
        """Stop serving (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
