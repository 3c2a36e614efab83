"""The demo payments stream: deterministic, in arrival order, with the promised pathologies."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lowwater.demo.generator import (
    COLUMNS,
    PaymentsSpec,
    generate_payments,
    write_demo,
    write_landing_zone,
)

SPEC = PaymentsSpec()


@pytest.fixture(scope="module")
def payments() -> pd.DataFrame:
    return generate_payments(SPEC)


def _delay(df: pd.DataFrame) -> pd.Series:
    return df["arrival_time"] - df["event_time"]


def test_same_seed_same_rows_other_seed_other_rows(payments: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(payments, generate_payments(PaymentsSpec()))
    other = generate_payments(PaymentsSpec(seed=8))
    assert not payments.equals(other)


def test_columns_and_shape(payments: pd.DataFrame) -> None:
    assert list(payments.columns) == COLUMNS
    assert len(payments) == int(SPEC.rate_per_s * SPEC.duration_s)
    assert set(payments["partition"]) == set(range(SPEC.partitions))
    assert set(payments["currency"]) <= {"EUR", "USD", "GBP"}
    assert payments["key"].str.fullmatch(r"m\d{3}").all()
    assert 40 <= payments["key"].nunique() <= 50
    # Zipf-ish: the busiest merchant far above the median one.
    counts = payments["key"].value_counts()
    assert counts.iloc[0] > 5 * counts.median()
    assert (payments["amount"] > 0).all()
    assert np.allclose(payments["amount"], payments["amount"].round(2))
    for col in ("event_time", "arrival_time"):
        ms = payments[col] * 1000
        assert np.allclose(ms, ms.round(), rtol=0, atol=1e-3)
    start = SPEC.start.timestamp()
    assert payments["event_time"].min() >= start
    assert payments["event_time"].max() < start + SPEC.duration_s


def test_rows_are_in_arrival_order(payments: pd.DataFrame) -> None:
    resorted = payments.sort_values(["arrival_time", "partition", "offset"], kind="stable")
    assert resorted.index.tolist() == list(range(len(payments)))


def test_offsets_count_per_partition_in_arrival_order(payments: pd.DataFrame) -> None:
    for _, group in payments.groupby("partition"):
        assert group["offset"].tolist() == list(range(len(group)))
        assert group["arrival_time"].is_monotonic_increasing


def test_delays_are_non_negative_and_heavy_tailed(payments: pd.DataFrame) -> None:
    delay = _delay(payments)
    assert (delay >= 0).all()
    assert delay.quantile(0.5) < 1
    assert delay.quantile(0.99) > 10
    assert delay.max() > 60
    # Away from the lagging and quiet partitions: ~95% within 1 s, a tail of minutes.
    plain = _delay(
        payments[~payments["partition"].isin([SPEC.lagging_partition, SPEC.quiet_partition])]
    )
    assert 0.93 <= (plain < 1).mean() <= 0.97
    assert 0.002 <= (plain >= 60).mean() <= 0.01


def test_lagging_partition_trails_by_lag(payments: pd.DataFrame) -> None:
    medians = _delay(payments).groupby(payments["partition"]).median()
    others = medians.drop(SPEC.lagging_partition)
    excess = medians[SPEC.lagging_partition] - others.median()
    assert abs(excess - SPEC.lag_s) < 1


def test_quiet_partition_has_an_outage_then_a_burst(payments: pd.DataFrame) -> None:
    quiet = payments[payments["partition"] == SPEC.quiet_partition]
    gaps = quiet["arrival_time"].diff()
    assert gaps.max() >= SPEC.quiet_for_s * 0.9
    # Nobody else goes quiet while events are produced (the stragglers' tail is sparse).
    end = SPEC.start.timestamp() + SPEC.duration_s
    for p, group in payments[payments["arrival_time"] < end].groupby("partition"):
        if p != SPEC.quiet_partition:
            assert group["arrival_time"].diff().max() < 10
    # The rows held back arrive when it comes back, with their old event times.
    back = quiet.loc[gaps.idxmax() :]
    burst = back[back["arrival_time"] < back["arrival_time"].iloc[0] + 5]
    assert (_delay(burst) > 30).sum() > 1000


def test_landing_zone_files(tmp_path: Path, payments: pd.DataFrame) -> None:
    paths = write_landing_zone(payments, tmp_path, file_span_s=SPEC.file_span_s)
    assert paths == sorted(tmp_path.glob("part-*.jsonl"))
    assert [p.name for p in paths] == sorted(p.name for p in paths)
    assert paths[0].name == "part-00000.jsonl"
    mtimes = [p.stat().st_mtime for p in paths]
    assert all(b > a for a, b in zip(mtimes, mtimes[1:], strict=False))

    per_file = [[json.loads(line) for line in p.read_text().splitlines()] for p in paths]
    back = pd.DataFrame([row for rows in per_file for row in rows])[COLUMNS]
    pd.testing.assert_frame_equal(back, payments, check_dtype=False)

    # Each file covers less than one span of arrival time, in order.
    last = -np.inf
    for rows in per_file:
        arrivals = [row["arrival_time"] for row in rows]
        assert min(arrivals) >= last
        assert max(arrivals) - min(arrivals) < SPEC.file_span_s
        last = max(arrivals)


def test_rewriting_removes_stale_files(tmp_path: Path, payments: pd.DataFrame) -> None:
    write_landing_zone(payments.head(5000), tmp_path, file_span_s=5)
    paths = write_landing_zone(payments.head(100), tmp_path, file_span_s=5)
    assert sorted(tmp_path.glob("part-*.jsonl")) == paths
    assert sum(len(p.read_text().splitlines()) for p in paths) == 100


def test_write_demo_writes_files_and_config(tmp_path: Path) -> None:
    spec = PaymentsSpec(duration_s=120, quiet_from_s=30, quiet_for_s=40, rate_per_s=50)
    config_path = write_demo(tmp_path / "demo", spec)
    assert config_path == tmp_path / "demo" / "demo.toml"
    assert list((tmp_path / "demo" / "landing").glob("part-*.jsonl"))

    cfg = tomllib.loads(config_path.read_text())
    assert cfg["source"] == {
        "format": "jsonl",
        "path": "landing",
        "partition": "partition",
        "offset": "offset",
        "arrival_time": "arrival_time",
        "event_time": "event_time",
        "time_unit": "s",
        "max_files_per_batch": 3,
    }
    assert cfg["watermark"] == {
        "max_out_of_orderness": "5s",
        "idle_timeout": "30s",
        "partitions": [0, 1, 2, 3, 4, 5, 6, 7],
    }
    assert cfg["window"] == {
        "type": "tumbling",
        "size": "1m",
        "allowed_lateness": "10s",
        "key": ["key"],
        "aggregations": {
            "total": "sum(amount)",
            "biggest": "max(amount)",
            "payments_avg": "avg(amount)",
        },
    }
    assert cfg["late"] == {"policy": "side_output"}
    assert cfg["output"] == {"path": "out"}
    assert cfg["spark"] == {"master": "local[*]"}
