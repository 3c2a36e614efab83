"""A source's watermark strategy: which generator each partition gets, and the rules around it.

Like Flink's ``WatermarkStrategy.forBoundedOutOfOrderness(d).withIdleness(t)``,
:class:`WatermarkStrategy` is a frozen config built fluently::

    >>> s = WatermarkStrategy.for_bounded_out_of_orderness(3_000_000).with_idleness(60_000_000)
    >>> s.bound_for("p7"), s.idle_timeout_us, s.kind
    (3000000, 60000000, 'bounded')
    >>> from lowwater.core.watermarks.punctuated import Punctuated
    >>> WatermarkStrategy.for_generator(Punctuated("is_marker")).kind
    'punctuated'

One strategy describes one source; a pipeline with several sources has one
per source, and the tracker keys its generators by ``(source, partition)``.
:meth:`WatermarkStrategy.generator_for` is the only place that decides which
generator a partition runs: the bounded one (with its per-partition ``L``)
unless another generator is configured, wrapped in idleness when an
``idle_timeout`` is set.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from lowwater.core.watermarks.bounded import BoundedOutOfOrderness
from lowwater.core.watermarks.idleness import WithIdleness
from lowwater.core.watermarks.protocol import GeneratorSpec


@dataclass(frozen=True)
class WatermarkStrategy:
    """How one source's partition watermarks are generated.

    Attributes:
        max_out_of_orderness_us: default bound ``L`` of the bounded generator.
        per_partition_us: bounded ``L`` for named partitions that differ from the default.
        idle_timeout_us: a partition with no arrivals for longer than this
            (arrival clock) leaves the min until it produces again.
        declared_partitions: partitions that must all report before ``W`` is
            defined; others are discovered and join when they first produce.
        max_future_skew_us: event times further than this ahead of their
            arrival time are clamped to the arrival time (SEMANTICS.md §5).
        generator: a generator other than bounded (punctuated, adaptive, or any
            registered with ``builder.register_strategy``); ``None`` means bounded
            by ``max_out_of_orderness_us``.
    """

    max_out_of_orderness_us: int = 0
    per_partition_us: tuple[tuple[str, int], ...] = ()
    idle_timeout_us: int | None = None
    declared_partitions: tuple[str, ...] = ()
    max_future_skew_us: int | None = None
    generator: GeneratorSpec | None = None
    _bounds: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        BoundedOutOfOrderness(self.max_out_of_orderness_us)
        for _, bound in self.per_partition_us:
            BoundedOutOfOrderness(bound)
        if self.idle_timeout_us is not None and self.idle_timeout_us <= 0:
            msg = "idle_timeout must be positive"
            raise ValueError(msg)
        if self.generator is not None and self.per_partition_us:
            msg = "per-partition bounds are for the bounded strategy only"
            raise ValueError(msg)
        self._bounds.update(dict(self.per_partition_us))

    @classmethod
    def for_bounded_out_of_orderness(cls, bound_us: int) -> WatermarkStrategy:
        """``W_p = max(event_time) - bound_us`` per partition (Flink's ``forBoundedOutOfOrderness``)."""
        return cls(max_out_of_orderness_us=bound_us)

    @classmethod
    def for_generator(cls, generator: GeneratorSpec) -> WatermarkStrategy:
        """A strategy whose per-partition watermark comes from ``generator`` (punctuated, adaptive)."""
        return cls(generator=generator)

    def with_idleness(self, idle_timeout_us: int | None) -> WatermarkStrategy:
        """A partition silent that long on the arrival clock leaves the min (``None``: never)."""
        return replace(self, idle_timeout_us=idle_timeout_us, _bounds={})

    def with_partitions(self, partitions: list[str] | tuple[str, ...]) -> WatermarkStrategy:
        """Declared partitions: ``W`` is undefined until every one of them has reported."""
        return replace(self, declared_partitions=tuple(str(p) for p in partitions), _bounds={})

    def with_bounds(self, bounds: dict[str, int]) -> WatermarkStrategy:
        """A bound (µs) per partition name, instead of the one bound, where given."""
        return replace(self, per_partition_us=tuple(sorted(bounds.items())), _bounds={})

    def with_max_future_skew(self, skew_us: int | None) -> WatermarkStrategy:
        """Event times more than ``skew_us`` ahead of the arrival clock are clamped to it (``None``: never)."""
        return replace(self, max_future_skew_us=skew_us, _bounds={})

    @property
    def kind(self) -> str:
        """The strategy's name: ``bounded``, ``punctuated``, ``adaptive`` or a registered one."""
        return BoundedOutOfOrderness.kind if self.generator is None else self.generator.kind

    @property
    def marker(self) -> str | None:
        """The boolean marker column of a punctuated source."""
        return None if self.generator is None else self.generator.marker_column()

    def bound_for(self, partition: str) -> int:
        """The bounded generator's ``L`` for ``partition``."""
        return self._bounds.get(partition, self.max_out_of_orderness_us)

    def generator_for(self, partition: str) -> GeneratorSpec:
        """The generator ``partition`` runs (with idleness around it when configured)."""
        spec: GeneratorSpec = self.generator or BoundedOutOfOrderness(self.bound_for(partition))
        return spec if self.idle_timeout_us is None else WithIdleness(spec, self.idle_timeout_us)

    def check_inputs(self, has_arrival: bool, has_marker: bool) -> None:
        """Raise ``ValueError`` if rows without these columns cannot drive this strategy."""
        self.generator_for("").check_inputs(has_arrival, has_marker)
