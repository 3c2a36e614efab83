""":class:`Pipeline`: a pipeline built in Python (from ``lw.stream(df, ...)``), the same one the TOML file builds.

Every builder call writes the key the configuration file would hold into a
TOML-shaped dict (``[source]``, ``[watermark]``, ``[window]``, ...);
:attr:`Pipeline.config` parses that dict with the file's own parser
(``config/pipeline.parse_config``), so both front doors give one
:class:`~lowwater.config.PipelineConfig` and one set of rules. A builder
returns a new pipeline (Spark's style: nothing is changed in place), and a
wrong argument raises one ``ValueError``/``TypeError`` naming it, before any
query starts. ``to_toml`` writes the dict back; ``from_toml`` reads it.
"""

from __future__ import annotations

import copy
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lowwater.api import toml_text
from lowwater.api.aggs import agg_text
from lowwater.api.args import choice, duration, names, streaming_columns
from lowwater.api.specs import ACCUMULATIONS, LATE_POLICIES, Sink, Watermark, WindowShape
from lowwater.config import PipelineConfig, apply_overrides, parse_config, resolve
from lowwater.config.source import DATAFRAME
from lowwater.core.tracker_state import DEFAULT_SOURCE

if TYPE_CHECKING:
    from lowwater.api.running import LowwaterQuery

_GENERATOR_KEYS = ("idle_timeout", "partitions", "max_future_skew")  # kept when .watermark() changes the strategy


@dataclass(frozen=True)
class Pipeline:
    """A lowwater pipeline: a source, its watermark, a window and its aggregates, sinks.

    ``data`` is the configuration as the TOML file holds it (never changed in
    place); ``df`` the streaming DataFrame of a ``format = "dataframe"``
    source; ``callbacks`` the ``lw.foreach_batch`` functions (Python only: not
    written by :meth:`to_toml`).
    """

    data: Mapping[str, Any]
    """The configuration, section by section, as the TOML file holds it."""
    df: Any = field(default=None, compare=False)
    """The streaming DataFrame of the source (several sources: a dict by source name)."""
    callbacks: tuple[Callable[..., None], ...] = field(default=(), compare=False)
    """The ``lw.foreach_batch`` functions."""
    base_dir: str = field(default_factory=os.getcwd)
    """What relative paths are relative to (a file's: its directory)."""

    def __repr__(self) -> str:  # the sections, not their values: output.postgres.url may hold a password
        parts = [f"{k}: {', '.join(f'{x}={y!r}' for x, y in v.items() if x != 'postgres')}"
                 if isinstance(v, dict) else f"{k}: {len(v)} tables" for k, v in self.data.items()]
        return f"Pipeline({'; '.join(parts)})"

    # -- building -----------------------------------------------------------------

    def _with(self, section: str, **keys: Any) -> Pipeline:  # noqa: ANN401
        data = copy.deepcopy(dict(self.data))
        table = data.setdefault(section, {})
        for k, v in keys.items():
            if v is None:
                table.pop(k, None)
            else:
                table[k] = v
        return replace(self, data=data)

    def watermark(self, strategy: Watermark) -> Pipeline:
        """The watermark strategy: ``lw.bounded("5s").with_idleness("1m")``, ``lw.punctuated``, ``lw.adaptive``."""
        self._one_source("watermark(strategy)")
        if not isinstance(strategy, Watermark):
            msg = (f"watermark(strategy): expected lw.bounded(...), lw.punctuated(...) or lw.adaptive(...), "
                   f"got {strategy!r}")
            raise TypeError(msg)
        kept = {k: v for k, v in self._watermark_table().items() if k == "max_future_skew"}
        return self._set_watermark({**dict(strategy.table), **kept})

    def clip(self, max_future_skew: Any) -> Pipeline:  # noqa: ANN401 - a duration
        """Clamp event times more than ``max_future_skew`` ahead of the arrival clock (needs ``arrival``)."""
        self._one_source("clip(max_future_skew=...)")
        skew = duration("clip(max_future_skew=...)", max_future_skew)
        return self._set_watermark({**self._watermark_table(), "max_future_skew": skew})

    def window(self, shape: WindowShape, key: str | list[str] | None = None) -> Pipeline:
        """Group by ``key`` (a column or a list; none: one global group) into windows of ``shape``."""
        if not isinstance(shape, WindowShape):
            msg = f"window(shape): expected lw.tumbling(...), lw.hopping(...) or lw.session(...), got {shape!r}"
            raise TypeError(msg)
        old = dict(self.data.get("window", {}))
        kept = {k: old[k] for k in ("aggregations", "allowed_lateness", "accumulation") if k in old}
        data = copy.deepcopy(dict(self.data))
        data["window"] = {**dict(shape.table), "key": names("window(key=...)", key), **kept}
        return replace(self, data=data)

    def agg(self, **aggregates: Any) -> Pipeline:  # noqa: ANN401 - Spark Columns
        """Named aggregates, ``total=F.sum("amount")``: count/sum/min/max/avg of a column (``count`` is always in)."""
        if not aggregates:
            msg = "agg(**aggregates): name at least one, e.g. agg(total=F.sum(\"amount\"))"
            raise ValueError(msg)
        src = self.data.get("source", {})
        times = tuple(t.get("event_time") for t in (src if isinstance(src, list) else [src]) if isinstance(t, dict))
        texts = {n: agg_text(f"agg({n}=...)", v, times) for n, v in aggregates.items()}
        return self._with("window", aggregations=texts)

    def lateness(self, grace: Any = "0s", policy: str = "side_output") -> Pipeline:  # noqa: ANN401
        """Rows up to ``grace`` behind the watermark revise their window; later ones go to ``late/`` or are dropped."""
        pipeline = self._with("window", allowed_lateness=duration("lateness(grace=...)", grace))
        return pipeline._with("late", policy=choice("lateness(policy=...)", policy, LATE_POLICIES))

    def trigger(self, early: Any = None, interval: Any = None) -> Pipeline:  # noqa: ANN401
        """Early firings of open windows (``early=1000`` rows or ``early="5s"`` of processing time); ``interval``."""
        text = None
        if early is not None:
            if isinstance(early, int) and not isinstance(early, bool):
                text = f"every {early} rows"
            elif isinstance(early, str) and early.strip().startswith("every "):
                text = early
            else:
                text = f"every {duration('trigger(early=...)', early, positive=True)}"
        return self._with("trigger", early=text,
                          interval=None if interval is None else duration("trigger(interval=...)", interval, True))

    def accumulate(self, mode: str) -> Pipeline:
        """What a revision holds: ``accumulating`` (the whole window), ``discarding`` (what is new), ``retracting``."""
        return self._with("window", accumulation=choice("accumulate(mode=...)", mode, ACCUMULATIONS))

    def write(self, *sinks: Sink) -> Pipeline:
        """Where results go: ``lw.parquet(path)``, at most one of ``lw.postgres``/``lw.delta``, ``lw.foreach_batch``."""
        if not sinks:
            msg = "write(*sinks): name at least one sink, e.g. write(lw.parquet(\"out\"))"
            raise ValueError(msg)
        paths, kinds, calls, pg = [], [], [], None
        for s in sinks:
            if not isinstance(s, Sink):
                msg = f"write(*sinks): expected lw.parquet/postgres/delta/foreach_batch(...), got {s!r}"
                raise TypeError(msg)
            if s.path is not None:
                paths.append(s.path)
            if s.kind in ("postgres", "delta"):
                kinds.append(s.kind)
                pg = dict(s.postgres) if s.kind == "postgres" else pg
            if s.callback is not None:
                calls.append(s.callback)
        if len(set(paths)) > 1:
            msg = (f"write(*sinks): the sinks name different paths ({', '.join(sorted(set(paths)))}); "
                   "every output goes under one")
            raise ValueError(msg)
        if len(kinds) > 1:
            msg = f"write(*sinks): at most one of lw.postgres and lw.delta, got {', '.join(kinds)}"
            raise ValueError(msg)
        data = copy.deepcopy(dict(self.data))
        old = data.get("output", {})
        output: dict[str, Any] = {k: old[k] for k in ("checkpoint",) if k in old}
        if paths:
            output["path"] = paths[0]
        if kinds:
            output["kind"] = kinds[0]
        if pg is not None:
            output["postgres"] = pg
        data["output"] = output
        return replace(self, data=data, callbacks=tuple(calls))

    def union(self, *others: Pipeline) -> Pipeline:
        """Several named streams as one (``[[source]]`` tables), each with its own watermark, then one window.

        Give each ``lw.stream(df, ..., name=...)`` its name, arrival column and
        ``.watermark(...)`` before the union, and the window and sinks after it.
        """
        tables, frames = self._named_tables("union(...)"), dict(self._frames())
        for other in others:
            if not isinstance(other, Pipeline):
                msg = f"union(*others): expected lw.stream(...) pipelines, got {other!r}"
                raise TypeError(msg)
            if set(other.data) - {"source", "watermark"}:
                msg = "union(*others): give the window, lateness and sinks after the union, not to the streams in it"
                raise ValueError(msg)
            tables += other._named_tables("union(*others)")
            frames.update(other._frames())
        data = copy.deepcopy({k: v for k, v in self.data.items() if k != "watermark"})
        data["source"] = tables
        return replace(self, data=data, df=frames)

    def interval_join(
        self, other: Pipeline, on: str | list[str], between: tuple[Any, Any], how: str = "inner",
        columns: Mapping[str, list[str]] | None = None,
    ) -> Pipeline:
        """Pairs of this stream's and ``other``'s rows with equal ``on`` keys and ``lower <= right - left <= upper``.

        Each side is a named ``lw.stream(df, ..., name=...)`` with its own
        ``.watermark(...)``; ``between=("0s", "30m")`` (``lower`` may be negative);
        ``how``: ``inner`` or ``left_outer``; ``columns={"left": [...], "right": [...]}``:
        what ``joined/`` carries besides the keys. The TOML file's ``[join]``.

        >>> rate = spark.readStream.format("rate").load().withColumnRenamed("value", "user")
        >>> clicks = lw.stream(rate, event_time="timestamp", arrival="timestamp", name="clicks")
        >>> orders = lw.stream(rate, event_time="timestamp", arrival="timestamp", name="orders")
        >>> joined = clicks.watermark(lw.bounded("5s")).interval_join(
        ...     orders.watermark(lw.bounded("1m")), on="user", between=("-5s", "30 minutes"))
        >>> joined.data["join"]
        {'left': 'clicks', 'right': 'orders', 'on': ['user'], 'lower': '-5s', 'upper': '30m', 'type': 'inner'}
        """
        from lowwater.api.join import join_table

        table = join_table(self, other, on, between, how, columns)
        data = copy.deepcopy(dict((joined := self.union(other)).data))
        data["join"] = table
        return replace(joined, data=data)

    def _named_tables(self, arg: str) -> list[dict[str, Any]]:
        """This pipeline's sources as ``[[source]]`` tables (each with its watermark): each needs a name."""
        src = self.data["source"]
        if isinstance(src, list):
            return copy.deepcopy(src)
        if "name" not in src:
            msg = f"{arg}: name each stream in a union: lw.stream(df, ..., name=\"radar\")"
            raise ValueError(msg)
        return [{**copy.deepcopy(src), "watermark": self._watermark_table()}]

    def _frames(self) -> dict[str, Any]:
        if isinstance(self.df, dict):
            return self.df
        src = self.data.get("source")
        return {} if self.df is None or not isinstance(src, dict) else {src.get("name", DEFAULT_SOURCE): self.df}

    def frames(self, cfg: PipelineConfig) -> dict[str, Any]:
        """Each ``format = "dataframe"`` source's DataFrame by name; one ``ValueError`` for one missing."""
        frames = self._frames()
        for s in cfg.sources:
            if s.format == DATAFRAME and s.name not in frames:
                msg = f"stream(df): no DataFrame for source {s.name!r} (Pipeline.from_toml(path, df=...))"
                raise ValueError(msg)
        return frames

    def _one_source(self, arg: str) -> None:
        if isinstance(self.data.get("source"), list):
            msg = f"{arg}: a union's streams each have their own: give it to each lw.stream(...) before .union(...)"
            raise ValueError(msg)

    def _watermark_table(self) -> dict[str, Any]:
        return dict(self.data.get("watermark", {}))

    def _set_watermark(self, table: dict[str, Any]) -> Pipeline:
        data = copy.deepcopy(dict(self.data))
        data["watermark"] = table
        return replace(self, data=data)

    # -- the model ----------------------------------------------------------------

    def with_checkpoint(self, checkpoint: str | os.PathLike[str] | None) -> Pipeline:
        """The pipeline with ``output.checkpoint`` set; outputs go under it when no sink names a path."""
        if checkpoint is None:
            return self
        text = str(checkpoint)
        text = text if "://" in text else os.path.abspath(text)
        pipeline = self._with("output", checkpoint=text)
        if "path" not in pipeline.data["output"]:
            pipeline = pipeline._with("output", path=f"{text.rstrip('/')}/outputs")
        return pipeline

    @property
    def config(self) -> PipelineConfig:
        """The validated configuration (the TOML file's parser): one ``ValueError`` naming the key if wrong."""
        if "window" not in self.data and "join" not in self.data:
            msg = "window: no window yet: call .window(lw.tumbling(...) | lw.hopping(...) | lw.session(...))"
            raise ValueError(msg)
        if not self.data.get("output", {}).get("path"):
            msg = "output: no output yet: call .write(lw.parquet(path)), or start(checkpoint=...) to write under it"
            raise ValueError(msg)
        return parse_config(copy.deepcopy(dict(self.data)), base_dir=self.base_dir)

    def to_toml(self) -> str:
        """The configuration file of this pipeline (``Pipeline.from_toml`` of it gives the same config)."""
        text = toml_text.dumps(dict(self.data))
        if self.callbacks:
            text = "# lw.foreach_batch callbacks are Python functions: not part of the file\n" + text
        return text

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str], df: Any = None, overrides: list[str] | None = None) -> Pipeline:  # noqa: ANN401
        """A pipeline from a configuration file; ``df``: the DataFrame of a ``format = "dataframe"`` source."""
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text())
        except FileNotFoundError:
            msg = f"from_toml(path=...): configuration file not found: {p}"
            raise ValueError(msg) from None
        except tomllib.TOMLDecodeError as e:
            msg = f"from_toml(path=...): {p}: not valid TOML: {e}"
            raise ValueError(msg) from None
        base = p.resolve().parent
        pipeline = cls(_absolute(apply_overrides(data, overrides or []), base), df=df, base_dir=str(base))
        cfg = pipeline.config  # validated now, not when the query starts
        wants = [s.name for s in cfg.sources if s.format == DATAFRAME]
        if wants and df is None:
            msg = f"from_toml(df=...): {p} reads source.format = \"dataframe\": pass the streaming DataFrame"
            raise ValueError(msg)
        if df is not None and not wants:
            msg = f"from_toml(df=...): {p} reads {cfg.sources[0].format} from {cfg.sources[0].path}, not a DataFrame"
            raise ValueError(msg)
        if isinstance(df, dict):  # [[source]] tables: a DataFrame per name
            if sorted(df) != sorted(wants):
                msg = f"from_toml(df=...): expected a DataFrame for each of {', '.join(wants)}, got {', '.join(df)}"
                raise ValueError(msg)
            for frame in df.values():
                streaming_columns(frame)
        elif df is not None:
            if len(wants) > 1:
                msg = f"from_toml(df=...): {p} has several DataFrame sources: pass {{name: DataFrame}}"
                raise ValueError(msg)
            streaming_columns(df)
            pipeline = replace(pipeline, df={wants[0]: df})
        pipeline.frames(cfg)
        return pipeline

    # -- running ------------------------------------------------------------------

    def start(
        self, checkpoint: str | os.PathLike[str] | None = None, *, once: bool = False, drain: bool = False,
        after_drain: bool = False, spark: Any = None,  # noqa: ANN401 - a SparkSession
    ) -> LowwaterQuery:
        """Start the streaming query; returns a handle shaped like Spark's ``StreamingQuery``.

        ``checkpoint``: where the query's state goes (default ``<path>/_checkpoint``);
        ``once``: process what is available, then stop; ``drain``: then fire every
        open window (the input is bounded and exhausted). ``spark``: the session of
        a file or Kafka source (default: the DataFrame's, else one built from ``[spark]``).
        """
        from lowwater.api.running import start

        return start(self.with_checkpoint(checkpoint), once=once or drain, drain=drain, after_drain=after_drain,
                     spark=spark)


_PATH_KEYS = {"source": ("path",), "output": ("path", "checkpoint"), "observe": ("prometheus_textfile",)}


def _absolute(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """The file's relative paths resolved against its directory, so the dict means the same written anywhere."""
    for section, keys in _PATH_KEYS.items():
        tables = data.get(section)
        for table in tables if isinstance(tables, list) else [tables]:
            if not isinstance(table, dict):
                continue
            for key in keys:
                if isinstance(table.get(key), str):
                    table[key] = resolve(base, table[key])
    return data
