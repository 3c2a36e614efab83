"""``lw.whatif(pipeline, ...)`` and ``lw.reconcile(pipeline, ...)``: the CLI's batch tools over a pipeline object.

Each is ``lowwater whatif --config`` / ``lowwater reconcile`` run in this
process on the pipeline's own configuration (the same code: the replay's
configuration rules, ``advisor/whatif.run_whatif``, ``reconcile/run.reconciled``),
and returns what the command prints as data instead of printing it. They run
on the active SparkSession when there is one (else one is built from the
pipeline's ``[spark]``). A bad argument is one ``ValueError``/``TypeError``
naming it, before Spark runs anything.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lowwater.api.args import duration
from lowwater.api.pipeline import Pipeline
from lowwater.api.specs import Watermark
from lowwater.api.toml_text import inline
from lowwater.config.source import DATAFRAME
from lowwater.time import to_duration_us

WHATIF_BOUNDS = ("0s", "2s", "5s", "10s", "20s", "40s")  # lowwater whatif --lateness's default


def _pipeline(arg: str, pipeline: Any) -> Pipeline:  # noqa: ANN401
    if not isinstance(pipeline, Pipeline):
        msg = f"{arg}: expected an lw.Pipeline (lw.stream(...) or lw.Pipeline.from_toml(...)), got {pipeline!r}"
        raise TypeError(msg)
    return pipeline


def _durations(arg: str, values: Any) -> list[int]:  # noqa: ANN401 - one duration or several
    items = [values] if isinstance(values, str) or not isinstance(values, Sequence) else list(values)
    if not items:
        msg = f"{arg}: give at least one duration"
        raise ValueError(msg)
    return [to_duration_us(duration(arg, v)) for v in items]


def _strategy_text(value: Any) -> str:  # noqa: ANN401
    """A compared strategy as ``--compare`` takes it: its text, or an ``lw.bounded(...)``-style object's table."""
    if isinstance(value, Watermark):
        return inline(dict(value.table))
    if isinstance(value, str):
        return value
    msg = f"whatif(compare=...): expected lw.bounded/punctuated/adaptive(...) or a strategy's text, got {value!r}"
    raise TypeError(msg)


def whatif(
    pipeline: Pipeline, lateness: Any = WHATIF_BOUNDS, grace: Any = "0s",  # noqa: ANN401 - durations
    compare: Sequence[Any] = (), log: str | os.PathLike[str] | None = None, log_format: str | None = None,
    target_completeness: float | None = None, latency_budget: Any = None, spark: Any = None,  # noqa: ANN401
) -> dict[str, Any]:
    """Replay the pipeline's log for every lateness bound ``L`` in ``lateness`` and grace ``G`` in ``grace``.

    What ``lowwater whatif --config`` prints, as data: ``results`` (one dict per
    (L, G): ``completeness``, ``too_late``, ``late_updates``, emit latencies,
    ``peak_open_windows``, ...), ``compared`` (one per ``compare`` strategy and G:
    ``lw.adaptive(0.999, over="10m")`` or a text such as ``"bounded 30s"``) and
    ``advice`` (with ``target_completeness``/``latency_budget``: the smallest L
    meeting them, or why none does; else why no window fired, or ``None``).

    The log is the pipeline's source path; a DataFrame source (``lw.stream``)
    has none, so pass ``log=`` (a file, directory or glob of csv/jsonl/parquet
    files with the DataFrame's columns; ``log_format`` when the names do not say).
    """
    from lowwater.advisor.advice import advice_for, completeness_error
    from lowwater.advisor.replay_config import replay_of

    data = copy.deepcopy(dict(_pipeline("whatif(pipeline)", pipeline).data))
    if "join" in data:
        msg = "whatif(pipeline): a join pipeline has no windows to replay"
        raise ValueError(msg)
    bounds, graces = _durations("whatif(lateness=...)", lateness), _durations("whatif(grace=...)", grace)
    budget = None if latency_budget is None else to_duration_us(
        duration("whatif(latency_budget=...)", latency_budget, positive=True)) / 1e6
    if target_completeness is not None:
        why = (completeness_error(target_completeness) if isinstance(target_completeness, int | float)
               and not isinstance(target_completeness, bool) else "expected a fraction in (0, 1]")
        if why is not None:
            msg = f"whatif(target_completeness={target_completeness!r}): {why}"
            raise ValueError(msg)
    texts = [_strategy_text(c) for c in compare]
    src = data.get("source")
    if any(t.get("format") == "kafka" for t in (src if isinstance(src, list) else [src]) if isinstance(t, dict)):
        msg = ("whatif(pipeline): a Kafka source is not replayed (its records are not a log of files); replay "
               "files of them: lw.whatif(lw.stream(df, ...)..., log=...)")
        raise ValueError(msg)
    if isinstance(src, dict) and src.get("format") == DATAFRAME:
        if log is None:
            msg = "whatif(log=...): a DataFrame source has no log to replay: pass its rows' files (csv/jsonl/parquet)"
            raise ValueError(msg)
        del src["format"]  # the log's, from its file names or log_format
    elif log is not None and not isinstance(src, dict):
        msg = "whatif(log=...): the pipeline has several sources, each replayed from its own path"
        raise ValueError(msg)
    if isinstance(src, list) and any(t.get("format") == DATAFRAME for t in src):
        msg = "whatif(pipeline): a union of DataFrame sources has no log to replay (replay each stream alone)"
        raise ValueError(msg)
    cfg = replay_of(data, Path(pipeline.base_dir), None if log is None else os.fspath(log),
                    {"format": log_format})
    from lowwater.advisor.compare import CompareError, compared_strategies
    from lowwater.advisor.whatif import SweepSpec, run_whatif, source_strategies
    from lowwater.io.headers import check_before_spark

    check_before_spark(cfg, saved=False)  # a missing column: one line before Spark runs
    try:
        compared = compared_strategies(texts, source_strategies(cfg), all(s.arrival_time for s in cfg.sources))
    except CompareError as e:
        msg = f"whatif(compare=...): {e}"
        raise ValueError(msg) from None
    if spark is None:
        from lowwater.runtime.session import get_spark

        spark = get_spark(cfg.spark)  # the active session if there is one
    everything = run_whatif(spark, cfg, SweepSpec(bounds, graces, compare=compared))
    results = [r for r in everything if "strategy" not in r]
    return {"results": results, "compared": [r for r in everything if "strategy" in r],
            "advice": advice_for(results, [s.watermark.idle_timeout_us for s in cfg.sources], target_completeness,
                                 budget)}


def reconcile(
    pipeline: Pipeline, since: Any = None, until: Any = None, apply: bool = False,  # noqa: ANN401 - instants
    spark: Any = None,  # noqa: ANN401 - a SparkSession
) -> dict[str, Any]:
    """Recompute every window over the pipeline's whole log and explain each difference from what it emitted.

    What ``lowwater reconcile`` prints, as data: the summary (``windows_checked``,
    ``windows_differing``, ``unexplained``, the causes, the largest differences);
    the differing windows are written to ``<output path>/reconcile``. ``since``/
    ``until``: only windows starting at or after / ending at or before that
    instant (ISO 8601 text, epoch seconds or a ``datetime``). ``apply``: write the
    corrections (``kind = "correction"``) to the pipeline's sinks, idempotent;
    refused while a run holds the outputs. Needs a file log (not a DataFrame,
    Kafka or Delta source): e.g. ``lw.Pipeline.from_toml(path)``.
    """
    from lowwater.reconcile.run import check, instant_us, reconciled

    cfg = _pipeline("reconcile(pipeline)", pipeline).config
    if not isinstance(apply, bool):
        msg = f"reconcile(apply=...): expected True or False, got {apply!r}"
        raise TypeError(msg)
    check(cfg)
    from_us, to_us = instant_us("reconcile(since=...):", since), instant_us("reconcile(until=...):", until)

    def start_spark(jars: list[str], conf: dict[str, str]) -> Any:  # noqa: ANN401 - a SparkSession
        if spark is not None:
            return spark
        from lowwater.runtime.session import get_spark

        return get_spark(cfg.spark, jars=jars, conf=conf)  # the active session if there is one

    with reconciled(cfg, from_us, to_us, apply, start_spark) as result:
        return result.summary
