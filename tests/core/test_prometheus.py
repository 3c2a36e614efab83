"""The Prometheus endpoint over HTTP, parsed with prometheus_client's own text parser (no Spark)."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from lowwater.observe.prometheus import PrometheusExporter
from tests.core.test_observe_model import ROW, TOTALS


def test_prometheus_endpoint_serves_the_model_over_http():
    exporter = PrometheusExporter(0, pipeline="out/demo", source="payments")
    try:
        exporter.on_step(3, ROW, TOTALS, {"partition_idle": True})
        body = urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=5).read().decode()
    finally:
        exporter.close()
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for fam in text_string_to_metric_families(body) for s in fam.samples}
    p = ("pipeline", "out/demo")
    assert got[("lowwater_low_watermark_seconds", (p,))] == 90.0
    assert got[("lowwater_watermark_seconds", (("partition", "b"), p, ("source", "payments")))] == 90.0
    assert got[("lowwater_rows_total", (("class", "too_late"), p))] == 5.0
    assert got[("lowwater_step_duration_seconds_count", (p,))] == 1.0
    assert got[("lowwater_step_duration_seconds_bucket", (("le", "1.0"), p))] == 1.0
    assert got[("lowwater_alert_firing", (p, ("rule", "partition_idle")))] == 1.0
    # its own registry: nothing of the process-wide default (python_info, process_*) leaks in
    assert not any(name.startswith(("python_", "process_")) for name, _ in got)


def test_names_pass_promtool_check_metrics():
    import shutil
    import subprocess

    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: run scripts/bootstrap.sh as root (apt-get install prometheus)"
    exporter = PrometheusExporter(0, pipeline="p", source="s")
    try:
        exporter.on_step(3, ROW, TOTALS, {"late_rate": True})
        body = urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=5).read()
    finally:
        exporter.close()
    done = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()


def test_textfile_holds_the_last_step_after_the_run(tmp_path):
    """``[observe] prometheus_textfile``: rewritten after every step, still there when a --once run has ended."""
    prom = tmp_path / "lowwater.prom"
    exporter = PrometheusExporter(None, pipeline="flights", source="flights", textfile=str(prom))
    assert exporter.port is None  # no endpoint asked for
    exporter.on_step(2, ROW, TOTALS, {})
    exporter.on_step(3, ROW, {**TOTALS, "too_late": 7}, {"late_rate": False})
    exporter.close()
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for fam in text_string_to_metric_families(prom.read_text()) for s in fam.samples}
    p = ("pipeline", "flights")
    assert got[("lowwater_rows_total", (("class", "too_late"), p))] == 7.0  # the last step's totals
    assert got[("lowwater_step_duration_seconds_count", (p,))] == 2.0
    assert got[("lowwater_alert_firing", (p, ("rule", "late_rate")))] == 0.0
    assert [f.name for f in tmp_path.iterdir()] == ["lowwater.prom"]  # no temporary file left beside it


def test_textfile_key_resolves_against_the_config_and_must_be_a_prom_file(tmp_path):
    import pytest

    from lowwater.config import ConfigError
    from lowwater.config.observe import parse_observe

    (tmp_path / "node").mkdir()
    assert parse_observe({"prometheus_textfile": "node/lw.prom"}, tmp_path).prometheus_textfile == str(
        tmp_path / "node" / "lw.prom")
    with pytest.raises(ConfigError, match=r"observe.prometheus_textfile: .*\*\.prom"):
        parse_observe({"prometheus_textfile": "node/lw.txt"}, tmp_path)
    with pytest.raises(ConfigError, match="its directory does not exist"):
        parse_observe({"prometheus_textfile": "nowhere/lw.prom"}, tmp_path)
