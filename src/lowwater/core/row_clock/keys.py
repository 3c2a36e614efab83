"""Arrival-order keys and the watermark as a step function over them.

A row's place in arrival order is a pair of int64 ``(major, minor)``: with an
arrival clock ``major`` is the arrival time (µs) and ``minor`` breaks ties the
way arrival order does (source, partition, offset, or any global sequence);
without one ``major`` is the row's rank in the source order. Keys are packed
into 16-byte strings that sort like the pairs, so one ``np.searchsorted``
finds a row's place among the step function's boundaries: no per-row Python,
and no need to know the row's global position.

    >>> step = WatermarkStepFunction(pack([10, 20], [0, 0]), np.array([5, 9]), -1)
    >>> step.lookup(np.array([9, 10, 15, 20, 99]), np.zeros(5, dtype=np.int64)).tolist()
    [-1, 5, 5, 9, 9]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_MINOR = np.iinfo(np.int64).min
"""The minor of a threshold key ``(t, MIN_MINOR)``: before every row arriving at ``t``."""

_SIGN = np.uint64(1 << 63)


def pack(major: np.ndarray | list[int], minor: np.ndarray | list[int]) -> np.ndarray:
    """Keys as 16-byte strings (``S16``) ordered like the ``(major, minor)`` pairs."""
    hi = (np.asarray(major, dtype=np.int64).view(np.uint64) ^ _SIGN).astype(">u8")
    lo = (np.asarray(minor, dtype=np.int64).view(np.uint64) ^ _SIGN).astype(">u8")
    out = np.empty((len(hi), 2), dtype=">u8")
    out[:, 0], out[:, 1] = hi, lo
    return out.view("S16").reshape(-1)


def unpack(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``(major, minor)`` int64 pairs of packed keys."""
    pairs = np.asarray(keys, dtype="S16").view(">u8").reshape(-1, 2).astype(np.uint64) ^ _SIGN
    return pairs[:, 0].view(np.int64), pairs[:, 1].view(np.int64)


def successor(keys: np.ndarray) -> np.ndarray:
    """The key right after each (``minor + 1``): nothing sorts strictly between a key and it."""
    major, minor = unpack(keys)
    return pack(major, minor + 1)


def threshold(arrival_us: np.ndarray) -> np.ndarray:
    """The key before every row arriving at ``arrival_us`` (and after every earlier one)."""
    at = np.asarray(arrival_us, dtype=np.int64)
    return pack(at, np.full(len(at), MIN_MINOR, dtype=np.int64))


@dataclass(frozen=True)
class WatermarkStepFunction:
    """``W`` over arrival order: ``values[i]`` from ``keys[i]`` (inclusive) on; ``before_us`` before the first key.

    Non-decreasing; a row's ``W(r)`` is the value at the last boundary at or
    before its key. Its size is the number of times ``W`` moves in the batch.
    """

    keys: np.ndarray  # S16, strictly increasing
    values: np.ndarray  # int64, non-decreasing
    before_us: int

    def lookup(self, major: np.ndarray, minor: np.ndarray) -> np.ndarray:
        """``W(r)`` for rows given by their keys, in any order (vectorised)."""
        return self.lookup_packed(pack(major, minor))

    def lookup_packed(self, keys: np.ndarray) -> np.ndarray:
        """``W(r)`` for rows given by their packed keys."""
        if not len(self.values):
            return np.full(len(keys), self.before_us, dtype=np.int64)
        at = np.searchsorted(self.keys, keys, side="right") - 1
        return np.where(at < 0, self.before_us, self.values[np.maximum(at, 0)])

    @property
    def final_us(self) -> int:
        """``W`` after the batch."""
        return int(self.values[-1]) if len(self.values) else self.before_us

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def of(cls, keys: np.ndarray, values: np.ndarray, before_us: int) -> WatermarkStepFunction:
        """From sorted keys and the running ``W`` at each: only the boundaries where ``W`` moves are kept."""
        prev = np.concatenate([[before_us], values[:-1]])
        moves = values != prev
        return cls(keys[moves], values[moves].astype(np.int64), before_us)
