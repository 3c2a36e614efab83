"""The low watermark: min over active inputs, monotone (SEMANTICS.md §2).

    W = max(W_previous, min over active inputs p of W_p)

* min, never max or mean: the slowest input governs;
* monotone: a lower proposal (an input rejoining behind ``W``) is ignored
  and counted;
* undefined (``NEG_INF``) while an input that takes part (declared, or it has
  produced rows) is active and has not promised anything yet; if every input
  is idle, ``W`` holds.

This module is the only place in lowwater that takes that min. An input is a
partition of a source (the tracker keys them by ``(source, partition)``); the
rule is the same for partitions of one source, several sources of a union, and
the two sides of a join.

Vectorised over evaluation points: :class:`MinOfInputs` folds the inputs one
at a time, each given as its ``W_p`` (and activity) at every point of a
micro-batch, so a batch costs O(points) memory whatever the number of inputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

import numpy as np

from lowwater.time import NEG_INF, POS_INF


class MinOfInputs:
    """The candidate min over inputs at each of ``points`` evaluation points."""

    def __init__(self, points: int) -> None:
        self.candidate = np.full(points, POS_INF, dtype=np.int64)
        self.waiting = np.zeros(points, dtype=bool)  # an active input that takes part has no W_p yet

    def add(
        self,
        watermark_us: np.ndarray,
        active: np.ndarray | None = None,
        takes_part: np.ndarray | bool = False,
    ) -> None:
        """Fold one input in.

        Args:
            watermark_us: the input's ``W_p`` at each point (``NEG_INF``: undefined).
            active: whether it counts at each point (``None``: never idle).
            takes_part: whether an undefined ``W_p`` makes ``W`` undefined at
                each point (a declared input, or one that has produced rows).
        """
        if active is None and not np.any(takes_part) and watermark_us.min(initial=POS_INF) > NEG_INF:
            np.minimum(self.candidate, watermark_us, out=self.candidate)  # defined and active throughout
            return
        defined = watermark_us > NEG_INF
        eligible = defined if active is None else defined & active
        np.minimum(self.candidate, np.where(eligible, watermark_us, POS_INF), out=self.candidate)
        if np.any(takes_part):
            waiting = takes_part & ~defined
            self.waiting |= waiting if active is None else waiting & active

    def proposals(self) -> np.ndarray:
        """The min at each point (``NEG_INF`` where undefined or no input counts)."""
        return np.where((self.candidate >= POS_INF) | self.waiting, NEG_INF, self.candidate)

    def low_watermark(self, previous_us: int) -> np.ndarray:
        """Running ``W`` at each point: never below ``previous_us``, never moving back."""
        return np.maximum.accumulate(np.maximum(self.proposals(), previous_us))


InputColumns = tuple[np.ndarray, np.ndarray | int | None, np.ndarray | bool]
"""One input over the evaluation points: ``W_p``, activity deadline (``None``: never idle), takes part."""


def min_at(points: int, inputs: Iterable[InputColumns], clocks: Sequence[np.ndarray | None]) -> list[MinOfInputs]:
    """The min over ``inputs`` at each point, once per arrival clock in ``clocks``.

    An input counts at a point while the arrival clock there has not passed its
    deadline (idleness, SEMANTICS.md §2: ``clock <= active_until``); a clock of
    ``None`` means every input counts. The inputs are consumed once, whatever
    the number of clocks, so they can be produced one at a time (O(points) memory).
    """
    mins = [MinOfInputs(points) for _ in clocks]
    for wm, until, part in inputs:
        for m, clock in zip(mins, clocks, strict=True):
            m.add(wm, None if until is None or clock is None else clock <= until, part)
    return mins


class InputStatus(Protocol):
    """One input's watermark now and whether it counts in the min."""

    @property
    def watermark_us(self) -> int: ...

    @property
    def active(self) -> bool: ...


S = TypeVar("S", bound=InputStatus)


def partition_spread(statuses: Iterable[S]) -> tuple[int | None, S | None]:
    """Spread (max ``W_p`` - min over active ``W_p``, SEMANTICS.md §7) and the input holding ``W`` back.

    Ties go to the first input given (the caller orders them).
    """
    defined = [s for s in statuses if s.watermark_us > NEG_INF]
    active = [s for s in defined if s.active]
    if not active:
        return None, None
    holder = active[int(np.argmin([s.watermark_us for s in active]))]
    return max(s.watermark_us for s in defined) - holder.watermark_us, holder


class SourcedStatus(InputStatus, Protocol):
    @property
    def source(self) -> str: ...


def source_watermarks(statuses: Iterable[SourcedStatus]) -> dict[str, int]:
    """Each source's own low watermark (display, SEMANTICS.md §7): min over its active, defined inputs."""
    out: dict[str, int] = {}
    for s in statuses:
        if s.active and s.watermark_us > NEG_INF:
            out[s.source] = min(out.get(s.source, POS_INF), s.watermark_us)
    return out
