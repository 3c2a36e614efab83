"""Exact quantiles of many sliding windows at once, in numpy.

The adaptive generator needs, for every row ``i``, a quantile of the delays of
the rows ``[lo[i], hi[i])`` of its partition. Sorting every window costs
O(rows x window); instead the values are ranked once and put in a *wavelet
matrix* (one stable partition by bit per level), and every window's k-th
smallest is found by walking the levels for all windows together:
O((rows + windows) x log(distinct values)) numpy work, no Python per row.

The quantile is the nearest-rank one: the ``ceil(q * m)``-th smallest of
``m`` values, always one of the values (an exact integer µs, no interpolation),
so it is a pure function of the window's contents.

    >>> range_quantiles(np.array([5, 1, 4, 2, 3]), np.array([0, 1, 0]), np.array([5, 3, 2]), 0.5).tolist()
    [3, 1, 1]
"""

from __future__ import annotations

import numpy as np

_EPS = 1e-9  # q * m computed in floating point: 0.999 * 1000 must give rank 999, not 1000


def nearest_rank(q: float, sizes: np.ndarray) -> np.ndarray:
    """0-based rank of the nearest-rank ``q``-quantile in windows of ``sizes`` (> 0) values."""
    k = np.ceil(q * sizes.astype(np.float64) - _EPS).astype(np.int64) - 1
    return np.clip(k, 0, sizes - 1)


def range_kth(ranks: np.ndarray, lo: np.ndarray, hi: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The ``k``-th smallest (0-based) of ``ranks[lo:hi]`` for every query; ranks are in ``[0, 2**bits)``."""
    cur = np.asarray(ranks, dtype=np.int64)
    lo, hi, k = (np.asarray(a, dtype=np.int64).copy() for a in (lo, hi, k))
    out = np.zeros(len(lo), dtype=np.int64)
    top = int(cur.max()) if len(cur) else 0
    for level in reversed(range(max(1, top.bit_length()))):
        ones = (cur >> level) & 1
        zeros_before = np.concatenate([[0], np.cumsum(1 - ones)])
        total_zeros = zeros_before[-1]
        zl, zh = zeros_before[lo], zeros_before[hi]
        right = k >= zh - zl
        k = np.where(right, k - (zh - zl), k)
        out |= right.astype(np.int64) << level
        lo = np.where(right, total_zeros + lo - zl, zl)
        hi = np.where(right, total_zeros + hi - zh, zh)
        cur = np.concatenate([cur[ones == 0], cur[ones == 1]])  # stable: the next level's order
    return out


def range_quantiles(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, q: float) -> np.ndarray:
    """Nearest-rank ``q``-quantile of ``values[lo[i]:hi[i]]`` for every ``i`` (each window non-empty)."""
    values = np.asarray(values, dtype=np.int64)
    lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    if not len(lo):
        return np.zeros(0, dtype=np.int64)
    distinct, ranks = np.unique(values, return_inverse=True)
    return distinct[range_kth(ranks.reshape(-1), lo, hi, nearest_rank(q, hi - lo))]
