"""What a partial field holds beyond numbers: bounded collections and DataSketches sketches (ADR 0034).

Each is "added" by its own merge (``+``), so ``core/partials.py``'s sum field carries it: a set union or a
merge in (event, arrival) order (:class:`Collection`), an HLL union (:class:`Sketch`), a KLL merge
(:class:`Quantiles`). On Spark the same values are arrays and sketch bytes (``spark/aggtypes.py``).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable

KLL_K = 200  # Spark's kll_sketch_agg default: normalised rank error about 1.65 % (ADR 0034)
HLL_LG_K = 12  # Spark's hll_sketch_agg default: relative standard error about 1.6 % (ADR 0034)
COLLECTION_LIMIT = 10_000  # values one window's collection may hold (ADR 0034)
COLLECTION_OVER = "lowwater: collection over its bound"  # the CLI turns an error starting so into its one line
_FEW = 8  # a merge with at most this many new entries inserts them (a session adds one row's at a time)


class Collection:
    """The values of a set or list input (``partials.SET``, ``partials.LIST``): ``+`` merges two."""

    __slots__ = ("items", "unique")

    def __init__(self, items: tuple, unique: bool) -> None:
        self.items, self.unique = items, unique

    def __add__(self, other: object) -> Collection:
        if not isinstance(other, Collection):
            return self  # 0 + c: a sum starts from 0
        if len(other.items) <= _FEW:  # a row's value into a session's collection: no sort of the whole
            items = self._inserted(other.items)
        else:
            merged_ = set(self.items) | set(other.items) if self.unique else [*self.items, *other.items]
            items = tuple(sorted(merged_))  # values of one column (or list entries), compared as they are
        if len(items) > COLLECTION_LIMIT:
            msg = f"{COLLECTION_OVER}: one window's collection holds more than {COLLECTION_LIMIT} values"
            raise OverflowError(msg)
        return Collection(items, self.unique)

    __radd__ = __add__

    def _inserted(self, few: tuple) -> tuple:
        """``self + few`` as the sort above gives it: each new entry after its equals (a sort is stable), or, in a
        set, not at all when an equal value is there (a set union keeps the left one)."""
        items = list(self.items)
        for x in few:
            if self.unique:
                i = bisect_left(items, x)
                if i == len(items) or items[i] != x:
                    items.insert(i, x)
            else:
                insort(items, x)
        return tuple(items)

    def __lt__(self, other: object) -> bool:  # its min/max fields are never read
        return False

    __gt__ = __lt__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Collection) and (self.items, self.unique) == (other.items, other.unique)

    def __hash__(self) -> int:
        return hash(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def values(self) -> list:
        return [x[-1] for x in self.items] if not self.unique else list(self.items)


def _hll_key(v: object) -> object:
    """What a value is hashed as: ints, floats and strings themselves; a Decimal as its text."""
    return v if isinstance(v, (int, float, str)) else str(v)


def hll_bytes(values: Iterable[object]) -> bytes:
    """The compact HLL sketch (lg K :data:`HLL_LG_K`, HLL_4, as Spark's ``hll_sketch_agg``) of some values."""
    import datasketches as ds

    sk = ds.hll_sketch(HLL_LG_K, ds.tgt_hll_type.HLL_4)
    for v in values:
        if v is not None and v == v:
            sk.update(_hll_key(v))
    return sk.serialize_compact()


class Sketch:
    """An HLL sketch's compact bytes: ``+`` is the union (the sum field's merge of a ``partials.HLL`` input)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __add__(self, other: object) -> Sketch:
        if not isinstance(other, Sketch):
            return self  # 0 + s: a sum starts from 0
        import datasketches as ds

        u = ds.hll_union(HLL_LG_K)
        u.update(ds.hll_sketch.deserialize(self.data))
        u.update(ds.hll_sketch.deserialize(other.data))
        return Sketch(u.get_result(ds.tgt_hll_type.HLL_4).serialize_compact())

    __radd__ = __add__

    def __lt__(self, other: object) -> bool:  # its min/max fields are never read
        return False

    __gt__ = __lt__

    def estimate(self) -> int:
        import datasketches as ds

        return round(ds.hll_sketch.deserialize(self.data).get_estimate())


def kll_bytes(values: Iterable[object]) -> bytes:
    """The KLL doubles sketch (k :data:`KLL_K`, as Spark's ``kll_sketch_agg_double``) of some values."""
    import datasketches as ds

    sk = ds.kll_doubles_sketch(KLL_K)
    for v in values:
        if v is not None and v == v:
            sk.update(float(v))  # type: ignore[arg-type]
    return sk.serialize()


class Quantiles(Sketch):
    """A KLL sketch's bytes: ``+`` merges two."""

    __slots__ = ()

    def __add__(self, other: object) -> Quantiles:
        if not isinstance(other, Quantiles):
            return self
        import datasketches as ds

        sk = ds.kll_doubles_sketch.deserialize(self.data)
        sk.merge(ds.kll_doubles_sketch.deserialize(other.data))
        return Quantiles(sk.serialize())

    __radd__ = __add__

    def quantile(self, p: float) -> float | None:
        import datasketches as ds

        sk = ds.kll_doubles_sketch.deserialize(self.data)
        # Inclusive search, as Spark's kll_sketch_get_quantile_double (the Java library's getQuantile(rank)
        # default); the Python binding defaults to exclusive: {3, 4} at 0.5 would give 4.0 where Spark gives 3.0.
        return None if sk.is_empty() else float(sk.get_quantile(p, True))
