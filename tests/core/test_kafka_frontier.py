"""Kafka partitions as lanes of the arrival frontier (core/frontier.py): any cut of a topic gives one batch's answer.

Spark's connector cuts a topic by offsets, each partition on its own
(``maxOffsetsPerTrigger`` in proportion to the backlogs). The property test
is SEMANTICS.md §8 for one topic: each partition cut at random points (a step
may bring nothing of a partition, and a partition may be caught up long before
the others), rows held while a partition with a backlog may still deliver
earlier arrivals, gives every row the same ``W(r)`` and verdict as the whole
topic judged at once -- with a lagging partition and a quiet one going idle.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lowwater.core.frontier import (
    STR_LANES,
    ArrivalFrontier,
    FrontierState,
    kafka_lane,
    lane_label,
    lane_of,
    split_topic_partition,
    tie_key,
)
from lowwater.core.judge import arrival_order, judge
from lowwater.core.lateness import Lateness
from lowwater.core.tracker import WatermarkTracker
from lowwater.core.watermarks import WatermarkStrategy
from lowwater.core.windows import TumblingWindows
from lowwater.time import NEG_INF, POS_INF

S = 1_000_000
LANES = [kafka_lane("source", p, "payments") for p in range(4)]
# One source reading two topics whose partitions share numbers (ADR 0043): a-0, a-1, b-0, b-1.
TOPIC_LANES = [kafka_lane("source", p % 2, "ab"[p // 2], by_topic=True) for p in range(4)]


def strategy() -> WatermarkStrategy:
    return WatermarkStrategy.for_bounded_out_of_orderness(2 * S).with_idleness(5 * S)


def test_lanes_sort_and_tie_like_arrival_order():
    assert [lane_label(lane) for lane in LANES] == ["payments-0", "payments-1", "payments-2", "payments-3"]
    # Partition 10 sorts after partition 9 (zero-padded), as (source, partition) does.
    assert kafka_lane("s", 9, "t") < kafka_lane("s", 10, "t")
    # Two topics of one source share a partition number: one tie key, neither goes first at equal arrival.
    assert tie_key(kafka_lane("s", 1, "a")) == tie_key(kafka_lane("s", 1, "b"))


def test_a_partition_with_a_backlog_holds_a_caught_up_one_does_not():
    f, state = ArrivalFrontier({}), FrontierState()
    p0, p1, p2 = LANES[:3]
    f.deliver(state, np.array([p0, p0, p1]), np.array([10, 50, 20]))
    logs = {p0: False, p1: False, p2: True}  # p2 is caught up (empty so far): it holds nobody
    assert f.frontier_us(state, logs) == 20
    assert lane_label(f.holder(state, logs)) == "payments-1"
    ready = f.ready(state, np.array([p0, p0, p1]), np.array([10, 50, 20]), logs)
    assert ready.tolist() == [True, False, True]  # p0's row at 50: p1 may still deliver 21..49
    # p1 caught up: nothing earlier can come, p0 alone never waits for itself.
    assert f.ready(state, np.array([p0]), np.array([50]), {p0: False, p1: True, p2: True}).tolist() == [True]
    # A partition with a backlog that has delivered nothing yet holds everything.
    assert f.frontier_us(state, {p0: False, p1: False, p2: False}) == NEG_INF
    assert f.frontier_us(state, {p0: True, p1: True, p2: True}) == POS_INF


@st.composite
def topics(draw):
    """Four partitions' records (per partition: non-decreasing timestamps) and random per-step cuts.

    Partition 3 lags in event time by more than L; partition 2 goes quiet part
    way (its idle timeout passes); arrivals may tie across partitions.
    """
    parts = []
    for p in range(4):
        n = draw(st.integers(0 if p == 2 else 1, 30))
        gaps = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
        arrival = np.cumsum(gaps) * S // 2
        if p == 2:
            arrival = arrival[arrival < 8 * S]  # quiet after 8 s
        delay = np.array(draw(st.lists(st.integers(0, 3), min_size=len(arrival), max_size=len(arrival)))) * S
        if p == 3:
            delay = delay + 6 * S
        parts.append((arrival.astype(np.int64), (arrival - delay).astype(np.int64)))
    steps = draw(st.integers(1, 8))
    # Per step, how many records each partition delivers (Spark may give a partition none).
    takes = [draw(st.lists(st.integers(0, 12), min_size=steps, max_size=steps)) for _ in range(4)]
    return parts, takes


def _judge(tracker, rows):
    """Judge ``rows`` ((arrival, lane, offset, event)) in arrival order: {(lane, offset): (W(r), verdict)}."""
    order = arrival_order(len(rows), np.array([r[0] for r in rows]), np.array([tie_key(r[1]) for r in rows]),
                          np.array([r[2] for r in rows]))
    rows = [rows[i] for i in order]
    j = judge(tracker, TumblingWindows(5 * S), 0, np.array([lane_label(r[1]) for r in rows]),
              np.array([r[3] for r in rows]), np.array([r[0] for r in rows]))
    return {(r[1], r[2]): (int(w), int(v)) for r, w, v in zip(rows, j.watermark_us, j.row_verdict, strict=True)}


def _rows(parts, lane_offsets, lanes=LANES):
    return [(int(parts[p][0][o]), lanes[p], o, int(parts[p][1][o])) for p, o in lane_offsets]


def _one_batch(parts, lanes=LANES):
    everything = [(p, o) for p in range(4) for o in range(len(parts[p][0]))]
    return _judge(WatermarkTracker(strategy()), _rows(parts, everything, lanes)) if everything else {}


def _cut(parts, takes, drain: bool, lanes=LANES):
    """Each step delivers each partition's next chunk; held rows wait for the frontier; the end drains or not."""
    tracker = WatermarkTracker(strategy())
    frontier, state = ArrivalFrontier({}), FrontierState()
    pos, held, seen = [0, 0, 0, 0], [], {}
    steps = len(takes[0])
    for k in range(steps + 1):
        last = k == steps
        new = []
        for p in range(4):
            n = len(parts[p][0]) - pos[p] if last else takes[p][k]  # the last step reads what is left
            hi = min(len(parts[p][0]), pos[p] + n)
            new += [(p, o) for o in range(pos[p], hi)]
            pos[p] = hi
        new_rows = _rows(parts, new, lanes)
        if new_rows:
            frontier.deliver(state, np.array([r[1] for r in new_rows]), np.array([r[0] for r in new_rows]))
        logs = {lanes[p]: pos[p] == len(parts[p][0]) for p in range(4)}  # caught up: nothing left to read
        pool = held + new_rows
        if not pool:
            continue
        mask = frontier.ready(state, np.array([r[1] for r in pool]), np.array([r[0] for r in pool]), logs).tolist()
        ready = [r for r, m in zip(pool, mask, strict=True) if m]
        held = [r for r, m in zip(pool, mask, strict=True) if not m]
        if ready:
            seen.update(_judge(tracker, ready))
        state = FrontierState.from_json(state.to_json())  # the manifest's round trip, as after a restart
    if drain and held:
        seen.update(_judge(tracker, held))
        held = []
    return seen, held


@settings(max_examples=80, deadline=None)
@given(topics())
def test_any_per_partition_cutting_gives_the_one_batch_answer(topic):
    parts, takes = topic
    seen, held = _cut(parts, takes, drain=False)
    assert not held  # every partition caught up at the end: nothing is held, no drain needed
    assert seen == _one_batch(parts)


def test_a_timestamp_going_backwards_within_a_partition_is_the_one_inexact_case():
    # p1's second record is stamped before its first (CreateTime set by a producer): in arrival order it
    # precedes p0's record at 5, but p0's record was judged in step 1 (p1 had delivered 6 then).
    parts = [(np.array([5 * S]), np.array([5 * S])), (np.array([6 * S, 4 * S]), np.array([6 * S, 4 * S])),
             (np.array([], dtype=np.int64), np.array([], dtype=np.int64)),
             (np.array([9 * S]), np.array([9 * S]))]
    seen, _ = _cut(parts, [[1, 0], [1, 1], [0, 0], [1, 0]], drain=True)
    assert set(seen) == set(_one_batch(parts))  # every row judged once, none lost ...
    tracker = WatermarkTracker(strategy())
    _judge(tracker, _rows(parts, [(0, 0), (1, 0), (3, 0)]))
    assert tracker.state.clock_us == 9 * S  # ... and the late-stamped row comes after a later arrival:
    # the engine counts that step as an arrival regression (its earliest arrival is before the clock).


def test_a_source_of_several_topics_has_a_lane_a_tie_key_and_a_name_per_topic_partition():
    assert [lane_label(lane) for lane in TOPIC_LANES] == ["a-0", "a-1", "b-0", "b-1"]
    assert sorted(TOPIC_LANES) == TOPIC_LANES  # (source, topic-partition): the order rows are sorted in
    assert len({tie_key(lane) for lane in TOPIC_LANES}) == 4  # two topics' partition 0 no longer tie
    # A single topic's lanes are what they were (checkpoints' frontier states name them).
    assert kafka_lane("s", 3, "t") == "s\x000000000003\x00t-3"
    assert split_topic_partition("orders-eu-12") == ("orders-eu", 12)
    assert [split_topic_partition(n) for n in ("3", "orders-", "-3", "orders-x")] == [None] * 4


def test_one_lane_rule_names_a_rows_lane_as_kafka_lane_does():
    """``lane_of`` on strings (the rule the Arrow and Spark adapters evaluate) gives the persisted lanes."""
    one = ("s",)  # a source of one topic: the partition number zero-padded, then its topic-partition
    assert lane_of(STR_LANES, "s", 3, "t-3", one, single=True) == kafka_lane("s", 3, "t") == "s\x000000000003\x00t-3"
    assert lane_of(STR_LANES, "s", "12", "t-12", one, single=True) == kafka_lane("s", 12, "t")
    assert lane_of(STR_LANES, "s", "2147483647", "t-2147483647", one, True) == "s\x002147483647\x00t-2147483647"
    # Several topics: the rows' partition is already the topic-partition, kept as it is (ADR 0043).
    assert lane_of(STR_LANES, "s", "orders-eu-3", "orders-eu-3", one, single=True) == \
        kafka_lane("s", 3, "orders-eu", by_topic=True) == "s\x00orders-eu-3\x00orders-eu-3"
    # Several sources: only those of partition lanes get one; a file source's lane is its name.
    assert lane_of(STR_LANES, "s", 3, "t-3", ("k", "s"), single=False) == kafka_lane("s", 3, "t")
    assert lane_of(STR_LANES, "files", "0", "f.jsonl", ("k", "s"), single=False) == "files"
    assert lane_of(STR_LANES, "files", "0", "f.jsonl", (), single=False) == "files"


@settings(max_examples=60, deadline=None)
@given(topics())
def test_any_cutting_of_several_topics_gives_the_one_batch_answer(topic):
    """The tie key (source, topic-partition) agrees with the rows' order: the frontier stays exact."""
    parts, takes = topic
    seen, held = _cut(parts, takes, drain=False, lanes=TOPIC_LANES)
    assert not held
    assert seen == _one_batch(parts, TOPIC_LANES)


def test_a_lagging_topic_is_not_judged_by_another_topics_progress():
    """Topic a's partition 0 is on time, topic b's partition 0 lags 8 s (L = 2 s), one record a second each.

    One generator per partition number (the old rule) judges b's rows against a's progress: many are
    too late. One per topic-partition: ``W`` is the min over both, and no row of either is too late.
    """
    arrival = np.repeat(np.arange(1, 31) * S, 2)
    topic = np.tile(np.array(["a", "b"]), 30)
    event = np.where(topic == "a", arrival, arrival - 8 * S)
    names = np.char.add(topic, "-0")

    def too_late(partitions: np.ndarray) -> np.ndarray:
        order = arrival_order(len(arrival), arrival, partitions, np.arange(len(arrival)))
        declared = strategy().with_partitions(np.unique(partitions).tolist())  # W waits for every one
        j = judge(WatermarkTracker(declared), TumblingWindows(5 * S), 0, partitions[order], event[order],
                  arrival[order])
        late = np.zeros(len(arrival), dtype=bool)
        late[order] = j.row_verdict == Lateness.TOO_LATE
        return late

    by_number = too_late(np.full(len(arrival), "0"))
    assert by_number[topic == "b"].sum() >= 10 and not by_number[topic == "a"].any()
    assert not too_late(names).any()
