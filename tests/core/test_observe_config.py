"""``[observe]``: off by default; every bad value is one line naming its key."""

from __future__ import annotations

import pytest

from lowwater.config import ConfigError, load_config
from lowwater.config.observe import ObserveConfig

BASE = """
[source]
path = "landing"
event_time = "t"
partition = "p"
[watermark]
max_out_of_orderness = "3s"
[window]
size = "10s"
[output]
path = "out"
"""


def _load(tmp_path, extra: str):
    f = tmp_path / "p.toml"
    f.write_text(BASE + extra)
    return load_config(f)


def test_absent_section_exports_nothing(tmp_path):
    assert _load(tmp_path, "").observe == ObserveConfig()


def test_observe_section(tmp_path):
    cfg = _load(tmp_path, '[observe]\nprometheus_port = 9464\npipeline = "payments"\nspark_progress = true\n')
    assert cfg.observe == ObserveConfig(prometheus_port=9464, pipeline="payments", spark_progress=True)
    assert cfg.observe.spark_progress_interval_us == 10_000_000  # Flink's reporter interval


def test_spark_progress_interval(tmp_path):
    cfg = _load(tmp_path, '[observe]\nspark_progress = true\nspark_progress_interval = "30s"\n')
    assert cfg.observe.spark_progress_interval_us == 30_000_000


@pytest.mark.parametrize(("extra", "key"), [
    ("prometheus_port = 70000", "observe.prometheus_port"),   # not a port
    ('prometheus_port = "9464"', "observe.prometheus_port"),  # a string
    ("prometheus_port = true", "observe.prometheus_port"),    # a bool is not a port
    ('spark_progress = "yes"', "observe.spark_progress"),
    ('pipeline = ""', "observe.pipeline"),
    ('spark_progress_interval = "200ms"', "observe.spark_progress_interval"),  # under a second
    ('spark_progress_interval = "soon"', "observe.spark_progress_interval"),
    ("port = 1", "observe.port"),                             # a typo is refused
])
def test_bad_values_name_their_key(tmp_path, extra, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        _load(tmp_path, f"[observe]\n{extra}\n")
