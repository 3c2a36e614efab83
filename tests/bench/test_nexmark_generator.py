"""Nexmark with disorder, no engine run: the generator's properties, the complete-answer counts,
the figures and ratios, and the lowwater pipelines as valid configurations."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from bench.nexmark import truth
from bench.nexmark.engines import QUERIES, Setup, lowwater_toml
from bench.nexmark.generator import BID, EPOCH, START_MS, Disorder, bids, idle_stretch, land
from bench.nexmark.run import figures, ratios

from lowwater.config import load_config

N = 46_000  # 1,000 epochs of 50 Nexmark events
D = Disorder()


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return bids(N, rate=1_000.0, seed=7)


def test_same_seed_same_rows_other_seed_other_rows(frame: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(frame, bids(N, rate=1_000.0, seed=7))
    assert not frame.equals(bids(N, rate=1_000.0, seed=8))


def test_bids_take_46_of_every_50_event_ids(frame: pd.DataFrame) -> None:
    # 46 bids per epoch of 50 events (1 person, 3 auctions): N bids span N / 46 * 50 events of time.
    span_ms = frame["date_time"].max() - frame["date_time"].min()
    assert span_ms == pytest.approx((N // BID) * EPOCH, rel=0.01)  # 1 event per ms at 1,000 events/s
    assert frame["date_time"].min() >= START_MS


def test_hot_auction_and_hot_bidder_shares(frame: pd.DataFrame) -> None:
    # Nexmark: half the bids go to the hot auction, three quarters to the hot bidder, of the moment.
    epoch = (frame["date_time"] - START_MS) // EPOCH  # one epoch per 50 ms at 1,000 events/s
    hot_auction = (epoch * 3 + 2) // 2 * 2 + 1000
    hot_bidder = epoch // 4 * 4 + 1 + 1000
    # a cold pick may land on the hot id too, so the shares are a little above 1/2 and 3/4
    assert 0.49 < (frame["auction"] == hot_auction).mean() < 0.53
    assert 0.74 < (frame["bidder"] == hot_bidder).mean() < 0.77
    assert frame["price"].min() >= 100 and frame["price"].max() <= 100_000_000


def test_rows_arrive_out_of_order_with_a_tail(frame: pd.DataFrame) -> None:
    assert (np.diff(frame["arrival_time"].to_numpy()) >= 0).all()  # written in arrival order
    event = frame["date_time"].to_numpy()
    assert (np.diff(event) < 0).mean() > 0.2  # event time goes back often
    delay = frame["arrival_time"] - frame["date_time"]
    normal = delay[frame["partition"] != D.lag_partition]
    assert (normal >= 0).all()
    assert 0.005 < (normal > D.tail_ms[0]).mean() < 0.02  # the tail: ~1 % beyond 2 s
    assert normal.median() < 500


def test_the_lagging_partition_lags(frame: pd.DataFrame) -> None:
    delay = frame["arrival_time"] - frame["date_time"]
    lag = delay[frame["partition"] == D.lag_partition]
    others = delay[frame["partition"] != D.lag_partition]
    assert (lag >= D.lag_ms).all()
    assert lag.median() - others.median() == pytest.approx(D.lag_ms, abs=100)


def test_the_idle_partition_is_idle_for_its_stretch(frame: pd.DataFrame) -> None:
    lo, hi = idle_stretch(frame)
    idle = frame[frame["partition"] == D.idle_partition]
    assert not ((idle["date_time"] >= lo) & (idle["date_time"] < hi)).any()
    assert (idle["date_time"] < lo).any() and (idle["date_time"] >= hi).any()  # quiet only for the stretch
    others = frame[(frame["partition"] != D.idle_partition) & (frame["date_time"] >= lo) & (frame["date_time"] < hi)]
    assert len(others) > 0.15 * len(frame)
    counts = frame["partition"].value_counts()
    assert counts.index.tolist() and set(counts.index) == set(range(D.partitions))


def test_offsets_number_each_partition_in_arrival_order(frame: pd.DataFrame) -> None:
    for _, g in frame.groupby("partition"):
        assert g["offset"].tolist() == list(range(len(g)))


def test_land_writes_every_slice_and_the_same_lines_per_partition(tmp_path, frame: pd.DataFrame) -> None:
    part = frame.iloc[:5_000]
    landed = land(part, tmp_path, slices=5, partitions=D.partitions)
    files = sorted(landed.slices.iterdir())
    assert len(files) == 5 * D.partitions
    mtimes = [f.stat().st_mtime for f in files]
    assert mtimes == sorted(mtimes)  # name order = modification order
    slices = []
    for s in range(5):
        rows = [json.loads(line) for f in files[s * D.partitions:(s + 1) * D.partitions]
                for line in f.read_text().splitlines()]
        arrival = [r["arrival_time"] for r in rows]
        assert all(r["partition"] == int(f.name[-7]) for f in files[s * D.partitions:(s + 1) * D.partitions]
                   for r in map(json.loads, f.read_text().splitlines()))
        slices.append((min(arrival), max(arrival), len(rows)))
    assert sum(n for _, _, n in slices) == len(part)
    # one slice after another in arrival time: D.partitions files at a time read the rows in arrival order
    assert all(a[1] <= b[0] for a, b in zip(slices, slices[1:], strict=False))
    for f in files:
        arrival = [json.loads(line)["arrival_time"] for line in f.read_text().splitlines()]
        assert arrival == sorted(arrival)
    for p, path in enumerate(landed.partition_files):
        slices = "".join(f.read_text() for f in files if f.name.endswith(f"-p{p}.jsonl"))
        assert path.read_text() == slices


def test_expected_body_counts_windows_by_hand() -> None:
    rows = pd.DataFrame({"date_time": [0, 1_000, 9_999, 10_000, 25_000], "bidder": [1, 1, 1, 2, 1]})
    # tumbling 10 s: windows [0,10) holds 3 rows, [10,20) one, [20,30) one
    assert truth.expected_body(QUERIES["q7"], rows, 10_000) == 3
    assert truth.expected_body(QUERIES["q7"], rows, 20_000) == 4
    # hopping 10 s / 2 s: the row at 0 is in windows ending 2, 4, 6, 8, 10
    assert truth.expected_body(QUERIES["q5"], rows.iloc[:1], 6_000) == 3
    # sessions (gap 10 s): bidder 1 [0, 19999), bidder 2 [10000, 20000), bidder 1 [25000, 35000)
    assert truth.expected_body(QUERIES["q11"], rows, 19_999) == 3
    assert truth.expected_body(QUERIES["q11"], rows, 20_000) == 4
    assert truth.expected_body(QUERIES["q11"], rows, 35_000) == 5


def test_the_lowwater_pipelines_are_valid_configurations(tmp_path, frame: pd.DataFrame) -> None:
    landed = land(frame.iloc[:1_000], tmp_path / "data", slices=2, partitions=D.partitions)
    setup = Setup(landed, lateness_s=2, idle_timeout_s=5, cores=2)
    shapes = {}
    for q in QUERIES.values():
        path = tmp_path / f"{q.name}.toml"
        path.write_text(lowwater_toml(q, setup, tmp_path / q.name))
        cfg = load_config(path)
        w = cfg.window
        shapes[q.name] = (w.type, w.size_us, w.slide_us, w.key, tuple(a.name for a in w.aggregations))
        assert cfg.sources[0].max_files_per_batch == D.partitions  # one arrival slice per step
    assert shapes["q5"] == ("hopping", 10_000_000, 2_000_000, ("auction",), ())
    assert shapes["q7"][:2] == ("tumbling", 10_000_000) and shapes["q7"][3:] == ((), ("max_price",))
    assert shapes["q11"][0] == "session" and shapes["q11"][3] == ("bidder",)


def test_figures_and_ratios_from_rounds() -> None:
    def counts(n: int) -> pd.DataFrame:
        return pd.DataFrame({"window_end_ms": [10_000, 20_000], "count": [n - 10, 10]})

    runs = {
        ("lowwater", "q7"): [{"seconds": 4.0, "counts": counts(1_000)}, {"seconds": 2.0, "counts": counts(1_000)}],
        ("spark", "q7"): [{"seconds": 1.0, "counts": counts(900)}],
        ("flink-rocksdb", "q7"): [{"error": "RuntimeError: no JVM"}],
    }
    rows = {r["engine"]: r for r in figures(runs, rows=1_000, cores=2, body={"q7": (10_000, 990)})}
    assert rows["lowwater"]["seconds"] == 2.0 and rows["lowwater"]["rounds_s"] == [4.0, 2.0]
    assert rows["lowwater"]["events_per_s_per_core"] == 250  # 1,000 rows / 2 s / 2 cores
    assert rows["lowwater"]["completeness"] == 1.0 and rows["spark"]["completeness"] == 0.9
    assert rows["spark"]["completeness_body"] == round(890 / 990, 5)
    assert rows["flink-rocksdb"] == {"engine": "flink-rocksdb", "query": "q7", "error": "RuntimeError: no JVM"}
    assert ratios(list(rows.values())) == {"q7": {"lowwater_over_spark": 0.5}}
