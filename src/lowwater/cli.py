"""The ``lowwater`` command line: ``run`` a pipeline, or see it work on the ``demo``.

A wrong configuration prints one line naming the key and exits with code 2;
no Java stack trace reaches the terminal. Nothing the user wrote (paths,
column names, values) goes through rich markup: the consoles print text as
is, so ``[observe]`` is not swallowed as a style tag. Ctrl-C and SIGTERM stop
a run after its current step (exit 130 / 143, see :func:`run`).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from lowwater import __version__
from lowwater.advisor.replay_config import input_format as _input_format  # noqa: F401 - tests import it
from lowwater.advisor.replay_config import replay_config as _replay_config
from lowwater.advisor.replay_config import split as _split
from lowwater.config import ConfigError, load_config

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="lowwater: event-time stream processing you can trust, on Apache Spark.",
)
_FMT = typer.Option("--format", help="csv | jsonl | parquet (default: from the file extension, else jsonl)")
_EVENT = typer.Option("--event-time", help="Column with the event time.")
_ARRIVAL = typer.Option("--arrival-time", help="Column with the arrival time (the order rows arrived in).")
_PARTITION = typer.Option("--partition", help="Column with the source partition.")
_QUIET = typer.Option("--quiet", "-q", help="No log lines and no Spark start-up banner.")

# markup=False: user text is printed verbatim (styles only through Text objects).
err = Console(stderr=True, markup=False, highlight=False, soft_wrap=True)
out = Console(markup=False, highlight=False, soft_wrap=True)


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(Text.assemble(("error:", "bold red"), " ", message))
    return typer.Exit(code)


def _say(message: str) -> None:
    """One status line on stderr (stdout keeps the summary / JSON)."""
    err.print(Text(message))


def _version(value: bool) -> None:
    if value:
        out.print(f"lowwater {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """lowwater: event-time stream processing you can trust, on Apache Spark."""


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("lowwater").setLevel(logging.INFO if verbose else logging.WARNING)
    # py4j logs a failed foreachBatch callback with its whole traceback, PySpark logs a failed
    # query's context as a JSON blob: the CLI reports the error itself, in one line.
    for name in ("py4j", "DataFrameQueryContextLogger", "SQLQueryContextLogger"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _spark_error_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


class _Interrupted(BaseException):
    """A signal before the query started: nothing to finish, stop at once."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _Signals:
    """SIGINT/SIGTERM during ``run``: before Spark is up, stop at once; then, after the current step.

    Once Spark is up the handler never raises (an exception inside a py4j call
    makes py4j log tracebacks): it asks the engine to stop, or, before the
    query starts, is noted and acted on just before it would start. A second
    signal abandons the step in flight (uncommitted, so a restart redoes it).
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.engine = None
        self.spark_up = False
        self.install()

    def install(self) -> None:
        """(Re)install the handlers: PySpark's SparkContext replaces SIGINT's with one that raises."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self)

    def __call__(self, signum: int, _frame: object) -> None:
        again = self.signum is not None
        self.signum = signum
        if not self.spark_up:
            raise _Interrupted(signum)
        if self.engine is not None:
            self.engine.request_stop(now=again)


def _wait_for_files(cfg, once: bool) -> None:  # noqa: ANN001 - a PipelineConfig
    """An empty landing zone and no schema: ``--once`` fails (exit 2), a continuous run waits for a file.

    The input schema is inferred from the files present (then kept with the
    checkpoint), so without ``source.schema`` there is nothing to start from.
    With several sources every source needs its files (or its schema).
    """
    from lowwater.io.files import landing_files, saved_schema
    from lowwater.io.sources import source_state_dir

    lw_dir = f"{cfg.output.checkpoint.rstrip('/')}/lowwater"
    for src in cfg.sources:
        saved = saved_schema(source_state_dir(lw_dir, src.name) if cfg.named_sources else lw_dir)
        if src.schema or (saved is not None and saved.exists()) or landing_files(src.path) != 0:
            continue
        if once:
            msg = (f"{src.key('path')}: {src.path} has no files to infer the schema from; add files or set "
                   f"{src.key('schema')}")
            raise ConfigError(msg)
        _say(f"waiting for files in {src.path} (the input schema is inferred from the first one; "
             f"or set {src.key('schema')})")
        while landing_files(src.path) == 0:
            time.sleep(0.5)


def _landed(cfg) -> int | None:  # noqa: ANN001 - a PipelineConfig
    """Files in every source's landing directory now (None when one is a URL)."""
    from lowwater.io.files import landing_files

    counts = [landing_files(src.path) for src in cfg.sources]
    return None if any(c is None for c in counts) else sum(counts)


def _paths(cfg) -> str:  # noqa: ANN001 - a PipelineConfig
    return ", ".join(src.path for src in cfg.sources)


@app.command()
def run(
    config: Annotated[Path, typer.Argument(help="Pipeline configuration (TOML).")],
    once: Annotated[bool, typer.Option("--once", help="Process what is available, then stop.")] = False,
    drain: Annotated[
        bool,
        typer.Option("--drain", help="At the end of bounded input, W = +inf: fire every open window (implies --once)."),
    ] = False,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a key: section.key=value (repeatable); relative paths resolve "
                     "against the configuration file's directory, as in the file."),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No per-step log lines and no Spark start-up banner.")
    ] = False,
    after_drain: Annotated[
        bool,
        typer.Option(
            "--after-drain",
            help="Accept new input on a checkpoint drained earlier: its rows are judged against W = +inf "
            "(all too late, reason: input declared finished). Without it such a run refuses.",
        ),
    ] = False,
    dashboard: Annotated[
        bool, typer.Option("--dashboard", help="Serve the live dashboard of this run (docs/observability.md).")
    ] = False,
    dashboard_port: Annotated[int, typer.Option("--dashboard-port", help="Port of --dashboard (0: any).")] = 8050,
) -> None:
    """Run a pipeline as a Spark Structured Streaming query.

    Relative paths resolve against the configuration file's directory. Ctrl-C
    or SIGTERM stops after the current step (a second one abandons the step,
    uncommitted) with exit code 130 / 143; the same command resumes.
    """
    _setup_logging(not quiet)
    signals = _Signals()
    try:
        _run(config, once or drain, drain, set_ or [], quiet, after_drain, signals,
             dashboard_port if dashboard else None)
    except _Interrupted as e:
        _say(f"stopped by {signal.Signals(e.signum).name} before the query started; nothing was committed")
        raise typer.Exit(128 + e.signum) from None


def _run(
    config: Path, once: bool, drain: bool, overrides: list[str], quiet: bool, after_drain: bool, signals: _Signals,
    dashboard_port: int | None = None,
) -> None:
    from lowwater.config import check_source_path
    from lowwater.io.lock import hold

    try:
        cfg = load_config(config, overrides)
        for src in cfg.sources:
            check_source_path(src, cfg.base_dir)
        hold(cfg)  # one run per output path: a second one refuses here, before Spark starts (io/lock.py)
        _wait_for_files(cfg, once)
        from lowwater.io.kafka import jars_for

        jars = jars_for(cfg)  # Spark's Kafka connector when a source is a topic
    except ConfigError as e:
        raise _fail(str(e)) from None
    from lowwater.report import start_line
    from lowwater.spark.engine import Engine
    from lowwater.spark.session import get_spark

    try:
        spark = get_spark(cfg.spark, quiet=quiet, jars=jars)
    except _Interrupted:
        raise
    except Exception as e:  # noqa: BLE001 - Spark start-up errors come in many types
        raise _fail(f"spark.master {cfg.spark.master!r}: could not start Spark: {_spark_error_line(e)}") from None
    signals.install()
    signals.spark_up = True
    try:
        engine = Engine(cfg, spark, after_drain=after_drain)
        signals.engine = engine
        if signals.signum is not None:
            raise _Interrupted(signals.signum)
        before = engine.store.latest()
        files = _landed(cfg)
        _say(start_line(cfg, before, files, once, drain))
        if files == 0 and not once:
            _say(f"waiting for files in {_paths(cfg)}")
        board = _serve_dashboard(cfg.output.path, dashboard_port) if dashboard_port is not None else None
        if err.is_terminal and not quiet:  # a live status line (observe/terminal.py); else the log lines
            from lowwater.observe.terminal import TerminalProgress

            with TerminalProgress(err) as progress:
                engine.observers.hooks.append(progress)
                manifest = engine.run(once=once, drain=drain)
        else:
            manifest = engine.run(once=once, drain=drain)
    except ConfigError as e:
        raise _fail(str(e)) from None
    except RuntimeError as e:
        if type(e).__name__ != "PostgresError":  # the URL is already masked in its message
            raise
        raise _fail(str(e), 1) from None
    except Exception as e:
        from lowwater.io.kafka import kafka_failure

        line = kafka_failure(cfg, e)  # a topic gone or a broker away: one line, not a JVM stack trace
        if line is None:
            raise
        raise _fail(line, 1) from None
    if signals.signum is not None:
        _say(f"stopped by {signal.Signals(signals.signum).name}: the checkpoint holds step {manifest.step} "
             "(a step in flight was not committed); run the same command to resume")
        raise typer.Exit(128 + signals.signum)
    if board is not None:  # a run stopped by a signal does not wait for another one
        _keep_serving(board, cfg.output.path, wait=signals.signum is None)
    if once and manifest.step == before.step:
        _say(f"nothing new in {_paths(cfg)} since step {before.step}: outputs unchanged")
    summary = engine.summary(manifest)
    if once:
        from lowwater.report import print_summary

        print_summary(out, summary, cfg.output.path)
    else:
        out.print(json.dumps(summary))


def _serve_dashboard(output_path: str, port: int, host: str = "127.0.0.1"):  # noqa: ANN202 - a Dashboard
    from lowwater.observe.dashboard import Dashboard

    try:
        board = Dashboard(output_path, port=port, host=host)
    except OSError as e:
        raise _fail(f"--port {port}: cannot serve the dashboard on {host}:{port}: {e}") from None
    _say(f"dashboard: {board.url}")
    return board


def _keep_serving(board, output_path: str, wait: bool = True) -> None:  # noqa: ANN001 - a Dashboard
    """After a run: write the static report; on a terminal, keep the dashboard up until Ctrl-C."""
    from lowwater.observe.dashboard import write_report

    _say(f"report: {write_report(output_path)}")
    if wait and sys.stdin.isatty():
        _say(f"dashboard of the finished run: {board.url} (Ctrl-C to stop)")
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    board.close()


@app.command()
def dashboard(
    output_path: Annotated[Path, typer.Argument(help="A run's output path (its metrics/, alerts/, results/).")],
    port: Annotated[int, typer.Option("--port", help="Port to serve on (0: any free port).")] = 8050,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    report: Annotated[
        bool, typer.Option("--report", help="Write OUTPUT_PATH/report.html (self-contained) and exit.")
    ] = False,
) -> None:
    """Serve the dashboard of a run (running or finished) until Ctrl-C; every asset is served locally."""
    if not (output_path / "metrics").is_dir():
        raise _fail(f"{output_path}: no metrics/ directory (expected a lowwater run's output.path)")
    if report:
        from lowwater.observe.dashboard import write_report

        out.print(str(write_report(output_path)))
        return
    board = _serve_dashboard(str(output_path), port, host)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        board.close()


@app.command()
def demo(
    directory: Annotated[Path, typer.Option("--dir", help="Where to write the demo landing zone and outputs.")] = Path(
        "demo-run"
    ),
    duration: Annotated[float, typer.Option(help="Seconds of event time to generate.")] = 600.0,
    rate: Annotated[float, typer.Option(help="Events per second of event time.")] = 200.0,
    master: Annotated[str, typer.Option(help="Spark master.")] = "local[*]",
    quiet: Annotated[bool, _QUIET] = False,
    no_dashboard: Annotated[
        bool, typer.Option("--no-dashboard", help="Do not serve the dashboard at the end (the report is written).")
    ] = False,
    dashboard_port: Annotated[int, typer.Option("--dashboard-port", help="Port of the dashboard (0: any).")] = 8050,
) -> None:
    """Generate a realistic payments stream and run it through lowwater on local Spark.

    At the end it writes a static report (OUTPUT/report.html) and, when stdin
    is a terminal, serves the dashboard until Ctrl-C (not with --no-dashboard).
    """
    _setup_logging(not quiet)
    from lowwater.demo.runner import run_demo

    try:
        summary = run_demo(directory, duration_s=duration, rate_per_s=rate, master=master, console=out)
    except ConfigError as e:
        raise _fail(str(e)) from None
    output_path = summary["output_path"]
    if not no_dashboard and sys.stdin.isatty():
        _keep_serving(_serve_dashboard(output_path, dashboard_port), output_path)
        return
    from lowwater.observe.dashboard import write_report

    _say(f"report: {write_report(output_path)}")
    if not no_dashboard:  # not on a terminal (CI, a pipe): nothing to wait for Ctrl-C, so the demo ends here
        _say(f"dashboard: run `lowwater dashboard {output_path}` to look at it live")


_INPUT_HELP = "The log: a file, a directory or a glob (quoted) of csv/jsonl/parquet files."
_WHATIF_INPUT_HELP = (f"{_INPUT_HELP} Optional with --config (its source path); left out with several [[source]] "
                      "tables (each source's own path).")


@app.command()
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
    from lowwater.time import to_duration_us

    if target_completeness is not None and not 0 < target_completeness <= 1:
        hint = f" ({target_completeness:g}% is {target_completeness / 100:g})" if 1 < target_completeness <= 100 else ""
        raise _fail(f"--target-completeness {target_completeness:g}: expected a fraction in (0, 1]{hint}")
    try:
        cfg = _replay_config(input_path, config, fmt, event_time, arrival_time, partition, offset, key,
                             time_unit, window, slide, idle_timeout, partitions, gap)
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
    from lowwater.advisor.advice import advise, nothing_fired
    from lowwater.advisor.compare import CompareError, compared_strategies
    from lowwater.advisor.plot import plot
    from lowwater.advisor.whatif import SweepSpec, run_whatif, source_strategies

    try:
        compared = compared_strategies(compare or [], source_strategies(cfg),
                                       all(s.arrival_time for s in cfg.sources))
    except CompareError as e:
        raise _fail(str(e)) from None
    from lowwater.spark.session import get_spark

    try:
        spark = get_spark(replace_master(cfg.spark, master), quiet=quiet)
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
    idles = [s.watermark.idle_timeout_us for s in cfg.sources if s.watermark.idle_timeout_us is not None]
    idle = max(idles) if idles else None  # the longest a quiet partition can hold W
    if target_completeness is not None or budget is not None:
        print_text(out, advise(results, target_completeness, budget, None if idle is None else idle / 1e6))
    elif nothing_fired(results) is not None:
        print_text(out, nothing_fired(results))


@app.command()
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
        from lowwater.spark.session import get_spark

        profile = delay_profile(get_spark(replace_master(cfg.spark, master), quiet=quiet), cfg)
    except ConfigError as e:
        raise _fail(str(e)) from None
    from lowwater.report import print_delays

    print_delays(out, profile)


def replace_master(spark_cfg, master: str):  # noqa: ANN001, ANN201
    from dataclasses import replace

    return replace(spark_cfg, master=master)


def main() -> None:
    """Entry point of the ``lowwater`` script."""
    app()


if __name__ == "__main__":
    main()
