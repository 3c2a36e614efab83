"""Row-by-row readings of SEMANTICS.md §2 for every generator, and of the min over inputs.

Deliberately plain Python, one row at a time, no numpy: the vectorised
generators and tracker must agree with these on random logs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from lowwater.core.watermarks import Adaptive, Punctuated, WatermarkStrategy
from lowwater.time import NEG_INF


@dataclass
class NaiveGenerator:
    """``W_p`` of one partition, one row at a time, for the strategy's generator."""

    strategy: WatermarkStrategy
    partition: str
    wp: int = NEG_INF
    max_event: int = NEG_INF
    seen: list[tuple[int, int]] = field(default_factory=list)  # (arrival, delay) of every row so far
    lateness: int | None = None
    regressions: int = 0

    def row(self, event: int, arrival: int | None, marker: bool) -> None:
        gen = self.strategy.generator
        if gen is None:
            self.max_event = max(self.max_event, event)
            self.wp = self.max_event - self.strategy.bound_for(self.partition)
            return
        if isinstance(gen, Punctuated):
            if marker:
                if self.wp > NEG_INF and event < self.wp:
                    self.regressions += 1
                self.wp = max(self.wp, event)
            return
        assert isinstance(gen, Adaptive) and arrival is not None
        self.max_event = max(self.max_event, event)
        self.seen.append((arrival, arrival - event))
        window = self.seen
        if gen.rows is not None:
            window = window[-gen.rows :]
        if gen.over_us is not None:
            window = [(a, d) for a, d in window if a > arrival - gen.over_us]
        delays = sorted(d for _, d in window)
        rank = math.ceil(Fraction(str(gen.target_quantile)) * len(delays))  # nearest rank, exact
        lateness = max(delays[max(rank, 1) - 1], gen.min_lateness_us)
        if gen.max_lateness_us is not None:
            lateness = min(lateness, gen.max_lateness_us)
        self.lateness = lateness
        proposal = self.max_event - lateness
        if self.wp > NEG_INF and proposal < self.wp:
            self.regressions += 1
        self.wp = max(self.wp, proposal)


Row = tuple[str, str, int, int | None, bool]  # source, partition, event, arrival, marker


def naive_low_watermarks(strategies: dict[str, WatermarkStrategy], rows: list[Row]) -> tuple[list[int], int]:
    """``W(r)`` for rows in arrival order, and the regressions ignored (generators' and rejoins')."""
    gens: dict[tuple[str, str], NaiveGenerator] = {}
    reported: set[tuple[str, str]] = set()
    last: dict[tuple[str, str], int] = {}
    declared = [(s, p) for s, strat in strategies.items() for p in strat.declared_partitions]
    w, start, out, rejoins = NEG_INF, None, [], 0

    def gen(key: tuple[str, str]) -> NaiveGenerator:
        return gens.setdefault(key, NaiveGenerator(strategies[key[0]], key[1]))

    def active(key: tuple[str, str], clock: int | None) -> bool:
        timeout = strategies[key[0]].idle_timeout_us
        return timeout is None or clock is None or clock - last.get(key, start) <= timeout

    def silent_source_waits(clock: int | None) -> bool:
        """A source of a union that has produced nothing has promised nothing (until it goes idle)."""
        if len(strategies) < 2:
            return False
        known = {s for s, _ in dict.fromkeys(declared + list(reported))}
        return any(
            name not in known and (strat.idle_timeout_us is None or clock is None or start is None
                                   or clock - start <= strat.idle_timeout_us)
            for name, strat in strategies.items()
        )

    def candidate(clock: int | None) -> int:
        inputs = [k for k in dict.fromkeys(declared + list(reported)) if active(k, clock)]
        if silent_source_waits(clock):
            return NEG_INF
        if not inputs or any(gen(k).wp <= NEG_INF for k in inputs):
            return NEG_INF  # nothing counts, or an input that takes part has promised nothing
        return min(gen(k).wp for k in inputs)

    for source, p, ev, arr, marker in rows:
        key = (source, p)
        if start is None:
            start = arr
        w = max(w, candidate(arr))
        out.append(w)
        was_in = key in reported and gen(key).wp > NEG_INF and active(key, arr)
        gen(key).row(ev, arr, marker)
        reported.add(key)
        if arr is not None:
            last[key] = arr
        if not was_in and NEG_INF < gen(key).wp < w:
            rejoins += 1  # brought back into the min behind W: ignored
        w = max(w, candidate(arr))  # right after r, r's partition is active
    return out, rejoins + sum(g.regressions for g in gens.values())
