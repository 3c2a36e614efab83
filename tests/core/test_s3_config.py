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


def test_without_the_connector_an_s3a_pipeline_stops_in_one_line(tmp_path, monkeypatch):
    from lowwater.io.s3 import s3_session

    monkeypatch.setenv("LOWWATER_S3_JARS", str(tmp_path))
    cfg = parse_config({**_raw(), "output": {"path": "s3a://bucket/out"}}, base_dir=".")
    with pytest.raises(ConfigError, match="^output.path: s3a:// paths need Hadoop's S3A connector, not found in ") as e:
        s3_session(cfg)
    assert "scripts/bootstrap.sh" in str(e.value) and "\n" not in str(e.value)
    own = {**_raw(), "output": {"path": "s3a://bucket/out"},
           "spark": {"conf": {"spark.jars.packages": "org.apache.hadoop:hadoop-aws:3.5.0"}}}
    assert s3_session(parse_config(own, base_dir=".")) == ([], {})  # the user's own connector wins
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-env")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-env")
    keyed = parse_config({**_raw(), "spark": {"s3": {"access_key": "file", "secret_key": "file-secret"}}}, base_dir=".")
    assert keyed.spark.s3.hadoop_conf()["fs.s3a.access.key"] == "from-env"  # the environment wins
    assert "secret" not in repr(keyed.spark.s3)
