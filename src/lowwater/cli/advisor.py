"""``lowwater whatif`` and ``lowwater delays``: choose L and G from the data (``lowwater.advisor``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from lowwater.advisor.replay_config import replay_config as _replay_config
from lowwater.advisor.replay_config import split as _split
from lowwater.cli.app import (
    _ARRIVAL,
    _EVENT,
    _FMT,
    _PARTITION,
    _QUIET,
    _fail,
    _setup_logging,
    job_progress,
    out,
    replace_master,
)
from lowwater.config import ConfigError

_INPUT_HELP = "The log: a file, a directory or a glob (quoted) of csv/jsonl/parquet files."
_WHATIF_INPUT_HELP = (f"{_INPUT_HELP} Optional with --config (its source path); left out with several [[source]] "
                      "tables (each source's own path).")


def whatif(
    input_path: Annotated[str | None, typer.Argument(help=_WHATIF_INPUT_HELP, show_default=False)] = None,
    fmt: Annotated[str | None, _FMT] = None,
    event_time: Annotated[str | None, _EVENT] = None,
    arrival_time: Annotated[str | None, _ARRIVAL] = None,
    partition: Annotated[str | None, _PARTITION] = None,
    offset: Annotated[str | None, typer.Option("--offset", help="Column: order within a partition.")] = None,
    key: Annotated[str | None, typer.Option("--key", help="COL[,COL]")] = None,
    time_unit: Annotated[str | None, typer.Option("--time-unit", help="s | ms | us")] = None,
    window: Annotated[str | None, typer.Option("--window", help="Window size, e.g. 10s.")] = None,
    slide: Annotated[str | None, typer.Option("--slide", help="Hopping slide, e.g. 1m.")] = None,
    gap: Annotated[
        str | None, typer.Option("--gap", help="Session windows with this gap, e.g. 30s (not with --window).")
    ] = None,
    lateness: Annotated[str, typer.Option("--lateness", help="Bounds L to try.")] = "0s,2s,5s,10s,20s,40s",
    allowed_lateness: Annotated[str, typer.Option("--allowed-lateness", help="Graces G to try.")] = "0s",
    idle_timeout: Annotated[
        str | None, typer.Option("--idle-timeout", help="A partition silent this long (arrival clock) is idle.")
    ] = None,
    partitions: Annotated[str | None, typer.Option("--partitions", help="Declared partitions, e.g. 0,1,2.")] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="Take source/watermark/window from a run config.")
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the results as a JSON list.")] = None,
    plot_out: Annotated[list[Path] | None, typer.Option("--plot", help="OUT.png or OUT.html (repeatable).")] = None,
    target_completeness: Annotated[
        float | None, typer.Option("--target-completeness", help="A fraction in (0, 1], e.g. 0.999.")
    ] = None,
    latency_budget: Annotated[str | None, typer.Option("--latency-budget", help="e.g. 12s")] = None,
    compare: Annotated[
        list[str] | None,
        typer.Option("--compare", help="A watermark strategy to put side by side (repeatable): 'bounded 30s', "
                     "'adaptive q=0.999 over=10m max=2m', 'punctuated is_marker', or an inline table "
                     "'{strategy = \"adaptive\", ...}'."),
    ] = None,
    master: Annotated[str, typer.Option(help="Spark master.")] = "local[*]",
    quiet: Annotated[bool, _QUIET] = False,
) -> None:
    """Replay a historical log for a grid of lateness bounds L and graces G (a Spark batch job)."""
    _setup_logging(not quiet)
    from lowwater.advisor.advice import completeness_error
    from lowwater.time import to_duration_us

    if target_completeness is not None and (why := completeness_error(target_completeness)) is not None:
        raise _fail(f"--target-completeness {target_completeness:g}: {why}")
    try:
        cfg = _replay_config(input_path, config, fmt, event_time, arrival_time, partition, offset, key,
                             time_unit, window, slide, idle_timeout, partitions, gap)
        from lowwater.io.headers import check_before_spark

        check_before_spark(cfg, saved=False)  # a missing column: one line before the JVM starts
        bounds = [to_duration_us(x) for x in _split(lateness)]
        graces = [to_duration_us(x) for x in _split(allowed_lateness)]
        budget = to_duration_us(latency_budget) / 1e6 if latency_budget else None
    except ConfigError as e:
        raise _fail(str(e)) from None
    except ValueError as e:
        raise _fail(f"--lateness/--allowed-lateness/--latency-budget: {e}") from None
    if budget is not None and budget <= 0:
        raise _fail(f"--latency-budget {latency_budget}: expected a positive duration")
    if not bounds or not graces:
        raise _fail("--lateness and --allowed-lateness need at least one duration")
    for p in plot_out or []:
        if p.suffix not in (".png", ".html"):
            raise _fail(f"--plot {p}: write .png or .html")
    from lowwater.advisor.advice import advice_for
    from lowwater.advisor.compare import CompareError, compared_strategies
    from lowwater.advisor.plot import plot
    from lowwater.advisor.whatif import SweepSpec, run_whatif, source_strategies

    try:
        compared = compared_strategies(compare or [], source_strategies(cfg),
                                       all(s.arrival_time for s in cfg.sources))
    except CompareError as e:
        raise _fail(str(e)) from None
    from lowwater.runtime.session import get_spark

    try:
        spark = get_spark(replace_master(cfg.spark, master), quiet=quiet)
        paths = ", ".join(str(s.path or s.name) for s in cfg.sources)
        headline = (f"what-if over {paths}: {len(bounds)} bound(s) x {len(graces)} grace(s)"
                    + (f" + {len(compared)} strateg{'y' if len(compared) == 1 else 'ies'}" if compared else ""))
        with job_progress(spark, headline, quiet):
            everything = run_whatif(spark, cfg, SweepSpec(bounds, graces, compare=compared))
    except ConfigError as e:
        raise _fail(str(e)) from None
    from lowwater.report import print_compare, print_text, print_whatif

    results = [r for r in everything if "strategy" not in r]
    print_whatif(out, results)
    if compared:
        print_compare(out, [r for r in everything if "strategy" in r])
    if json_out is not None:
        json_out.write_text(json.dumps(everything, indent=2) + "\n")
    for p in plot_out or []:
        plot(results, str(p), target_completeness, budget, [r for r in everything if "strategy" in r])
    advice = advice_for(results, [s.watermark.idle_timeout_us for s in cfg.sources], target_completeness, budget)
    if advice is not None:
        print_text(out, advice)


def delays(
    input_path: Annotated[str, typer.Argument(help=_INPUT_HELP)],
    fmt: Annotated[str | None, _FMT] = None,
    event_time: Annotated[str | None, _EVENT] = None,
    arrival_time: Annotated[str | None, _ARRIVAL] = None,
    partition: Annotated[str | None, _PARTITION] = None,
    time_unit: Annotated[str | None, typer.Option("--time-unit", help="s | ms | us")] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="Take the source columns from a run config.")
    ] = None,
    master: Annotated[str, typer.Option(help="Spark master.")] = "local[*]",
    quiet: Annotated[bool, _QUIET] = False,
) -> None:
    """Delay profile per partition: arrival - event quantiles, longest silence, skew."""
    _setup_logging(not quiet)
    try:
        cfg = _replay_config(input_path, config, fmt, event_time, arrival_time, partition, None, None,
                             time_unit, None, None, None, None, several=False)
        from lowwater.advisor.delays import delay_profile
        from lowwater.runtime.session import get_spark

        spark = get_spark(replace_master(cfg.spark, master), quiet=quiet)
        with job_progress(spark, f"delay profile of {cfg.source.path}", quiet):
            profile = delay_profile(spark, cfg)
    except ConfigError as e:
        raise _fail(str(e)) from None
    from lowwater.report import print_delays

    print_delays(out, profile)


