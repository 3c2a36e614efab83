"""The arrival frontier: how far several independently cut sources may be judged.

Arrival order across sources is ``(arrival_time, source, partition, offset)``
(SEMANTICS.md §1), but Spark advances each source on its own: one source's
micro-batch may reach arrival time 600 s while another's reaches 20 s. A row
judged now must not precede, in arrival order, a row of another source that
only lands in a later micro-batch, or ``W(r)`` would depend on the cut (§8).

Each source's files arrive in arrival order, so once a source has delivered a
row arriving at ``a_s`` it will deliver nothing earlier. The **frontier** is
``F = min over sources of a_s``: every row arriving before ``F`` has been
delivered, whichever source it belongs to, so rows with ``arrival < F`` are
judged now, in arrival order, and the rest are *held* (kept in the checkpoint,
counted as ``held_rows``) until the frontier passes them. Strictly before: a
row of another source may still arrive *at* ``F``.

A source that has gone quiet would hold everything back for ever. As with a
partition (§2), a source whose watermark table sets ``idle_timeout`` stops
holding the frontier once the arrival clock (the latest arrival delivered by
any source) is more than ``idle_timeout`` past its own latest arrival; a
source that has delivered nothing yet counts from the run's first arrival.
**Only a silent source goes idle**: a source with landed, unread input (told
at each step in ``logs``: source -> caught up, False while its file log holds
files Spark has not given it yet) is not silent, whatever the clock says: the
other sources only ran ahead of it because Spark cut them differently, so it
holds the frontier like any other source until it has been read. That makes
idleness independent of the cut: a source is released at a step only when it
is caught up, and then it is idle at every later step too (its latest arrival
no longer moves, the clock only grows), exactly as in one batch of everything
landed. Without ``idle_timeout`` a silent source holds the frontier until it
delivers or the run drains (``F = +inf``: everything held is judged). A row of
an idle source that lands after it was released, behind the frontier, is
judged when it comes, after rows that arrived later (the planner warns): the
one place where a cut can change a result, and only for a source that had no
input landed at all when it went idle by its configured timeout, as in Flink.

**Kafka partitions are lanes of their own.** Spark's Kafka connector cuts a
micro-batch across partitions by offsets (``maxOffsetsPerTrigger`` in
proportion to each partition's backlog), not by record time, so the partitions
of one topic are independently cut logs, like several sources. Each Kafka
partition is a *lane* (:func:`lane_of`: the one rule naming a row's lane, which
the driver's Arrow and the executors' Spark SQL evaluate through thin
adapters, :class:`LaneOps`) that holds the frontier at its latest delivered
arrival while it still has a *backlog* (records beyond what
was delivered); a partition that is *caught up* (Spark's end offset for the
step reached the partition's end offset when the step ran) holds nobody back:
it has nothing earlier to deliver. Which partitions are caught up is told at
each step (``logs``: lane -> caught up, next to the file sources'); no idle
timeout applies to a Kafka lane's hold, since its backlog is known. This is
exact when each partition's record timestamps do not decrease with the offset
and a record appended to a caught-up partition is not stamped before the rows
already judged (always so with ``LogAppendTime``; with ``CreateTime`` when
producers stamp the current time): otherwise the late-stamped record is
judged when it comes, counted as an arrival regression if it precedes its own
partition's earlier records (:meth:`ArrivalFrontier.regressions`), warned
about otherwise.

**A source of several topics names its partitions by topic.** A Kafka source
partition is a topic-partition: one that can deliver more than one topic
(several topics, a pattern) runs one watermark generator per
``topic-partition`` (:func:`topic_partition`), so two topics' partition 0 do
not share one (ADR 0043). A single-topic source keeps the partition number as
its name (its checkpoints, declared partitions and metrics say ``0``, ``1``).

Ties: arrival order is ``(arrival_time, source, partition, offset)``. A lane's
*tie key* (:func:`tie_key`) is its ``(source, partition)``: a row at the same
arrival as another lane's bound goes first only when its tie key sorts first.
The partition is the number (zero-padded) of a single-topic source and the
``topic-partition`` of a source of several topics: the same partition its
rows are ordered and watermarked by.

Pure numpy; the engine keeps :class:`FrontierState` in its manifest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

from lowwater.core.watermarks.idleness import active_until_us
from lowwater.time import NEG_INF, POS_INF

LANE_SEP = "\x00"  # sorts before every printable character: (source, partition) order is kept


def topic_partition(topic: str, partition: int) -> str:
    """A Kafka partition as logs, metrics and a source of several topics name it: ``orders-0``."""
    return f"{topic}-{partition}"


def split_topic_partition(name: str) -> tuple[str, int] | None:
    """``orders-eu-3`` -> ``("orders-eu", 3)``; None for a name that is not ``<topic>-<number>`` (e.g. ``3``)."""
    topic, sep, number = name.rpartition("-")
    return (topic, int(number)) if sep and topic and number.isdigit() else None


V = TypeVar("V")


class LaneOps(Protocol[V]):
    """The string operations :func:`lane_of` is written in, on one backend's values ``V``.

    Plain ``str`` here (:data:`STR_LANES`), Arrow arrays on the driver (``spark/planner.py``), Spark
    Columns on the executors (``spark/ready.py``): one rule, as :func:`before_bound` is for numpy and
    Spark. A condition is whatever the backend's ``if_else`` takes (a bool, a boolean array or Column).
    """

    def text(self, value: Any) -> V: ...  # a partition as a string (a number or a topic-partition)
    def contains(self, value: V, sub: str) -> Any: ...
    def lpad(self, value: V, width: int, fill: str) -> V: ...
    def join(self, sep: str, parts: Sequence[V]) -> V: ...
    def is_in(self, value: V, names: Sequence[str]) -> Any: ...
    def if_else(self, cond: Any, then: V, other: V) -> V: ...


class _StrLanes:
    """:class:`LaneOps` on Python strings: one row's lane."""

    def text(self, value: Any) -> str:
        return str(value)

    def contains(self, value: str, sub: str) -> bool:
        return sub in value

    def lpad(self, value: str, width: int, fill: str) -> str:
        return value.rjust(width, fill)

    def join(self, sep: str, parts: Sequence[str]) -> str:
        return sep.join(parts)

    def is_in(self, value: str, names: Sequence[str]) -> bool:
        return value in names

    def if_else(self, cond: Any, then: str, other: str) -> str:
        return then if cond else other


STR_LANES = _StrLanes()


def lane_of(ops: LaneOps[V], source: V, part: Any, file: V, by_partition: Sequence[str], single: bool) -> V:
    """A row's lane of the arrival frontier: THE rule, evaluated by each backend's ``ops``.

    A file source's lane is its ``source`` name. A source in ``by_partition`` (Kafka's) has a lane per
    partition: ``source, partition, topic-partition`` (``file``), NUL-separated, the middle being the
    partition as arrival order sorts it: its number zero-padded to 10 digits, or, for a source of
    several topics whose ``part`` is already a ``topic-partition`` (ADR 0043), that. ``single``: every
    row is of the one source, which is in ``by_partition`` (no ``_source`` to test). These strings are
    persisted (frontier states in manifests, ``logs``): they must never change.
    """
    if not by_partition:
        return source
    part = ops.text(part)
    middle = ops.if_else(ops.contains(part, "-"), part, ops.lpad(part, 10, "0"))
    lane = ops.join(LANE_SEP, [source, middle, file])
    return lane if single else ops.if_else(ops.is_in(source, by_partition), lane, source)


def kafka_lane(source: str, partition: int, topic: str, by_topic: bool = False) -> str:
    """A Kafka partition's lane (:func:`lane_of`): ``source, partition, topic-partition``, NUL-separated.

    The middle is the partition as arrival order sorts it: its number zero-padded, or with
    ``by_topic`` (a source of several topics, whose rows' partition is the topic-partition) that.
    """
    label = topic_partition(topic, partition)
    return lane_of(STR_LANES, source, label if by_topic else partition, label, (source,), single=True)


def tie_key(lane: str) -> str:
    """What arrival order compares at equal arrival times: the source (a file source) or (source, partition)."""
    return LANE_SEP.join(lane.split(LANE_SEP)[:2])


def before_bound(arrival: Any, lane: str, bound: tuple[int, str], lit: Callable[[Any], Any] = lambda x: x) -> Any:
    """Whether rows of ``lane`` arriving at ``arrival`` sort before ``bound`` = ``(at, first lane)`` in arrival
    order: an earlier arrival, or the same one and ``lane``'s tie key sorts first. ``arrival`` is a numpy array
    (the driver's mask, :meth:`ArrivalFrontier.ready`) or a Spark column with ``lit = F.lit`` (the executors'
    filter, ``spark/ready.py``): one rule for both, as ``<``, ``==``, ``&`` and ``|`` mean the same there."""
    at, first = bound
    return (arrival < lit(at)) | ((arrival == lit(at)) & lit(tie_key(lane) < tie_key(first)))


def lane_label(lane: str) -> str:
    """A lane as logs and metrics show it: the source's name, or Kafka's ``topic-partition``."""
    return lane.rsplit(LANE_SEP, 1)[-1]


@dataclass(frozen=True)
class Lanes:
    """How a pipeline's rows fall into lanes, as its sources declare them (``io/source.SourceKind``).

    ``own``: the sources that are one lane each, with their ``idle_timeout`` (None: never idle);
    ``by_partition``: the sources each of whose partitions is a lane (Kafka's); ``single``: the name of
    the only source of a ``[source]`` table (its rows carry no ``_source`` column), else None.
    """

    own: Mapping[str, int | None]
    by_partition: tuple[str, ...] = ()
    single: str | None = None

    @property
    def hold(self) -> bool:
        """Rows may wait behind the frontier: more than one lane can deliver (one source: a union of one)."""
        return len(self.own) + len(self.by_partition) > 1 or bool(self.by_partition)

    def frontier(self) -> ArrivalFrontier | None:
        """The frontier rule over these lanes (None: one lane, nothing is ever held)."""
        return ArrivalFrontier(dict(self.own)) if self.hold else None


@dataclass
class FrontierState:
    """Per source, the latest arrival it has delivered (``NEG_INF``: nothing yet); the run's first arrival."""

    latest_us: dict[str, int] = field(default_factory=dict)
    start_us: int = NEG_INF

    def to_json(self) -> dict:
        return {"latest_us": dict(self.latest_us), "start_us": self.start_us}

    @classmethod
    def from_json(cls, data: Mapping | None) -> FrontierState:
        if not data:
            return cls()
        return cls({str(k): int(v) for k, v in data.get("latest_us", {}).items()}, int(data.get("start_us", NEG_INF)))


@dataclass(frozen=True)
class ArrivalFrontier:
    """The frontier rule for a set of sources and their idle timeouts (``None``: never idle)."""

    idle_timeout_us: Mapping[str, int | None]

    def deliver(self, state: FrontierState, sources: np.ndarray, arrival_us: np.ndarray) -> None:
        """Record a micro-batch's delivered rows per lane (any order; dead letters excluded by the caller)."""
        if not len(arrival_us):
            return
        arr = np.asarray(arrival_us, dtype=np.int64)
        names = np.asarray(sources)
        state.start_us = int(arr.min()) if state.start_us <= NEG_INF else min(state.start_us, int(arr.min()))
        for name in np.unique(names).tolist():
            mine = arr[names == name]
            state.latest_us[name] = max(state.latest_us.get(name, NEG_INF), int(mine.max()))

    def regressions(
        self, state: FrontierState, sources: np.ndarray, arrival_us: np.ndarray,
    ) -> list[tuple[str, int, int]]:
        """Lanes whose new rows arrive before what they delivered earlier: ``(lane, earliest, latest before)``.

        Call before :meth:`deliver`, with a micro-batch's new rows only (rows
        carried from the held store were delivered before). Each lane is
        compared with its own past, never with another source that reads
        ahead of it: only input that really landed out of its arrival order
        counts (``arrival_regressions``).
        """
        arr = np.asarray(arrival_us, dtype=np.int64)
        names = np.asarray(sources)
        out = []
        for name in np.unique(names).tolist():
            earliest, before = int(arr[names == name].min()), state.latest_us.get(name, NEG_INF)
            if earliest < before:
                out.append((name, earliest, before))
        return out

    def clock_us(self, state: FrontierState) -> int:
        """The arrival clock: the latest arrival any source has delivered."""
        return max(state.latest_us.values(), default=NEG_INF)

    def idle(self, state: FrontierState, logs: Mapping[str, bool] | None = None) -> list[str]:
        """Sources that no longer hold the frontier: silent for longer than their ``idle_timeout``.

        A source that ``logs`` says is not caught up (landed, unread input) is never idle.
        """
        clock = self.clock_us(state)
        out = []
        for name, timeout in self.idle_timeout_us.items():
            if timeout is None or clock <= NEG_INF or not (logs or {}).get(name, True):
                continue
            if clock > active_until_us(state.latest_us.get(name, NEG_INF), state.start_us, timeout):
                out.append(name)
        return out

    def holding(self, state: FrontierState, logs: Mapping[str, bool] | None = None) -> list[tuple[int, str]]:
        """The lanes that hold the frontier, as sorted ``(latest arrival, lane)``.

        The file sources that are not idle (a file source with unread files in
        ``logs`` never is), and the Kafka lanes of ``logs`` (lane -> caught up)
        that still have a backlog.
        """
        idle = set(self.idle(state, logs))
        out = [(state.latest_us.get(name, NEG_INF), name) for name in self.idle_timeout_us if name not in idle]
        out += [(state.latest_us.get(lane, NEG_INF), lane) for lane, done in (logs or {}).items()
                if not done and lane not in self.idle_timeout_us]
        return sorted(out)

    def frontier_us(self, state: FrontierState, logs: Mapping[str, bool] | None = None) -> int:
        """``F``, the earliest latest arrival of the lanes that hold it (``POS_INF``: none does)."""
        holding = self.holding(state, logs)
        return holding[0][0] if holding else POS_INF

    def holder(self, state: FrontierState, logs: Mapping[str, bool] | None = None) -> str | None:
        """The lane holding the frontier (the first by name on ties), for metrics and logs."""
        holding = self.holding(state, logs)
        return holding[0][1] if holding else None

    def bounds(
        self, state: FrontierState, logs: Mapping[str, bool] | None = None, lanes: Iterable[str] = (),
    ) -> dict[str, tuple[int, str] | None]:
        """Per lane, the ``(arrival, lane)`` its rows must sort before to be judged (None: no bound).

        The bound of ``s`` is the least ``(latest_t, t)`` over the other
        holding lanes ``t``: ``t`` can only deliver rows from there on. Every
        file source, every lane of ``logs`` and every lane of ``lanes`` (those
        of the rows to judge) gets one.
        """
        holding = self.holding(state, logs)
        out: dict[str, tuple[int, str] | None] = {}
        for name in dict.fromkeys([*self.idle_timeout_us, *(logs or {}), *lanes]):
            others = [(a, t) for a, t in holding if t != name]
            out[name] = others[0] if others else None
        return out

    def ready(
        self, state: FrontierState, sources: np.ndarray, arrival_us: np.ndarray, logs: Mapping[str, bool] | None = None,
    ) -> np.ndarray:
        """Mask of rows that may be judged now.

        A row of source ``s`` arriving at ``a`` is ready when every *other*
        holding source ``t`` can only deliver rows after it in arrival order:
        ``(a, s) < (latest_t, t)``. A source's own later rows come after its
        earlier ones (its files are in arrival order), so one source alone
        never waits for itself; the ready rows are always a prefix of the
        arrival order of what was delivered.
        """
        arr = np.asarray(arrival_us, dtype=np.int64)
        names = np.asarray(sources)
        present = np.unique(names).tolist()
        bounds = self.bounds(state, logs, present)
        out = np.zeros(len(arr), dtype=bool)
        for name in present:
            rows = names == name
            bound = bounds.get(name)
            if bound is None:
                out[rows] = True
                continue
            out[rows] = before_bound(arr[rows], name, bound)
        return out
