"""``[spark.s3]``: checked in one line, turned into ``spark.hadoop.fs.s3a.*`` only for ``s3a://`` pipelines."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lowwater.config import ConfigError, parse_config


def test_spark_s3_settings_are_checked_and_become_fs_s3a():
    cfg = parse_config({
        "source": {"format": "jsonl", "path": "landing", "event_time": "t", "schema": "t DOUBLE"},
        "window": {"type": "tumbling", "size": "10s", "aggregations": {"n": "count(t)"}},
        "output": {"path": "s3a://bucket/x"},
        "spark": {"s3": {"endpoint": "http://127.0.0.1:9", "path_style_access": True}},
    }, base_dir=".")
    from lowwater.io.s3 import s3_session

    jars, conf = s3_session(cfg)
    assert any("hadoop-aws-3.5.0.jar" in j for j in jars)
    assert conf == {"spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9",
                    "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
                    "spark.hadoop.fs.s3a.path.style.access": "true"}
    assert s3_session(replace(cfg, output=replace(cfg.output, path="out", checkpoint="out/_c"))) == ([], {})
    with pytest.raises(ConfigError, match="^spark.s3.path_style_access: expected true or false"):
        parse_config({**_raw(), "spark": {"s3": {"path_style_access": "yes"}}}, base_dir=".")
    with pytest.raises(ConfigError, match="^unknown key spark.s3.endpont"):
        parse_config({**_raw(), "spark": {"s3": {"endpont": "http://x"}}}, base_dir=".")


def _raw() -> dict:
    return {
        "source": {"format": "jsonl", "path": "landing", "event_time": "t", "schema": "t DOUBLE"},
        "window": {"type": "tumbling", "size": "10s", "aggregations": {"n": "count(t)"}},
        "output": {"path": "out"},
    }
