"""The wheel: ``pip install`` of it brings the whole Python side, its package data and the ``lowwater`` script.

The wheel is built from a copy of the project (``pip wheel --no-deps
--no-build-isolation``: offline, with the dev extra's setuptools) and unpacked
as an installer would (a pure wheel is its files); a Python started on that
folder alone, away from the checkout, imports lowwater from it, finds the files
it reads at run time, and, with no ``.jars`` folder, says in one line which
``spark.jars.packages`` brings the Kafka connector or Delta. No JVM starts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = r'''
import os, sys
from importlib.metadata import entry_points
import lowwater as lw
site = sys.argv[1]
assert lw.__file__.startswith(site), lw.__file__
from lowwater.config import ConfigError, SparkConfig, parse_config
from lowwater.observe.dashboard import _page
from lowwater.runtime.jars import from_checkout
from lowwater.runtime.session import session_conf
log4j = session_conf(SparkConfig())["spark.driver.extraJavaOptions"].split("file:", 1)[1].split()[0]
assert log4j.startswith(site) and os.path.isfile(log4j), log4j
assert "<html" in _page().lower() and not from_checkout()
(ep,) = [e for e in entry_points(group="console_scripts") if e.name == "lowwater"]
assert ep.value == "lowwater.cli:main" and str(ep.dist._path).startswith(site)
from lowwater.io.delta import delta_session
from lowwater.io.kafka import jars_for
data = {"source": {"format": "kafka", "bootstrap_servers": "b:9092", "topic": "t", "schema": "a DOUBLE",
                   "event_time": "a"},
        "window": {"type": "tumbling", "size": "10s"}, "output": {"path": "out", "kind": "delta"}}
for check in (jars_for, lambda c: delta_session(c)):
    try:
        check(parse_config(data))
    except ConfigError as e:
        print(e)
sys.argv = ["lowwater", "--help"]
ep.load()()
'''


def test_the_wheel_holds_the_package_its_data_and_script_and_runs_without_the_checkout(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, project / name)
    shutil.copytree(ROOT / "src" / "lowwater", project / "src" / "lowwater",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(project), "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path / "dist")], check=True, timeout=300, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("lowwater-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        z.extractall(tmp_path / "site")
    modules = {str(p.relative_to(ROOT / "src")) for p in (ROOT / "src" / "lowwater").rglob("*.py")}
    assert modules <= names, sorted(modules - names)
    assert {"lowwater/runtime/log4j2.properties", "lowwater/observe/dashboard.html"} <= names
    assert "Requires-Dist: pyspark==4.2.0" in meta

    site = str(tmp_path / "site")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOWWATER_")} | {"PYTHONPATH": site}
    proc = subprocess.run([sys.executable, "-c", PROBE, site], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    kafka, delta = lines[0], lines[1]
    assert kafka.startswith("source.format: kafka needs Spark's Kafka connector: set [spark.conf] "
                            '"spark.jars.packages" = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"')
    assert delta.startswith('output.kind: "delta" needs Delta Lake\'s jars: set [spark.conf] '
                            '"spark.jars.packages" = "io.delta:delta-spark_4.2_2.13:4.4.0"')
    assert "bootstrap.sh" not in kafka + delta  # no checkout, no script to run
    assert "Usage: lowwater" in proc.stdout and "reconcile" in proc.stdout
