"""``lowwater run``: start a pipeline; Ctrl-C and SIGTERM stop it after its current step (exit 130 / 143)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Annotated

import typer

from lowwater.cli.app import (
    _fail,
    _say,
    _setup_logging,
    _spark_error_line,
    err,
    out,
)
from lowwater.cli.dashboard import _keep_serving, _serve_dashboard
from lowwater.config import ConfigError, load_config


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


def refused_line(error: BaseException) -> str | None:
    """One line for a step refused for its data (nothing of it was committed; None: another error).

    A sum beyond its type (refused, never wrapped around: ``cli/app.sum_overflow``), or a landed Parquet file
    with a column Spark cannot read, such as a nanosecond timestamp (``io/files.unreadable_parquet``).
    """
    from lowwater.cli.app import sum_overflow
    from lowwater.io.files import unreadable_parquet

    found = sum_overflow(error) or unreadable_parquet(error)
    return None if found is None else f"{found}; the step was not committed (the checkpoint holds the last one)"


def _wait_for_files(cfg, once: bool) -> None:  # noqa: ANN001 - a PipelineConfig
    """An empty landing zone and no schema: ``--once`` fails (exit 2), a continuous run waits for a file.

    The input schema is inferred from the files present (then kept with the
    checkpoint), so without ``source.schema`` there is nothing to start from.
    With several sources every source needs its files (or its schema).
    """
    from lowwater.io.headers import landing_files, saved_schema_of

    for src in cfg.sources:
        saved = saved_schema_of(cfg, src)
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


def _check_before_spark(cfg) -> None:  # noqa: ANN001 - a PipelineConfig
    """The checks that need only the files' columns, before the JVM starts (``io/headers.py``): one line, exit 2."""
    from lowwater.io.headers import check_before_spark, naive_clock_warning

    warning = naive_clock_warning(cfg, check_before_spark(cfg))
    if warning is not None:
        _say(f"warning: {warning}")


def _landed(cfg) -> int | None:  # noqa: ANN001 - a PipelineConfig
    """Files in every source's landing directory now (None when one is a URL)."""
    from lowwater.io.headers import landing_files

    counts = [landing_files(src.path) for src in cfg.sources]
    return None if any(c is None for c in counts) else sum(counts)


def _paths(cfg) -> str:  # noqa: ANN001 - a PipelineConfig
    return ", ".join(src.path for src in cfg.sources)


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
        _check_before_spark(cfg)
        hold(cfg)  # one run per output path: a second one refuses here, before Spark starts (io/lock.py)
        _wait_for_files(cfg, once)
        from lowwater.io.delta import delta_session
        from lowwater.io.kafka import jars_for
        from lowwater.io.s3 import s3_session

        delta_jars, delta_conf = delta_session(cfg)  # Delta Lake's jars and extension for kind = "delta"
        s3_jars, s3_conf = s3_session(cfg)  # Hadoop's S3A connector and [spark.s3] for s3a:// paths
        jars = jars_for(cfg) + delta_jars + s3_jars  # Spark's Kafka connector when a source is a topic
    except ConfigError as e:
        raise _fail(str(e)) from None
    from lowwater.observe.hub import Observers
    from lowwater.report import start_line
    from lowwater.runtime.session import get_spark
    from lowwater.spark.engine import Engine

    try:
        spark = get_spark(cfg.spark, quiet=quiet, jars=jars, conf={**delta_conf, **s3_conf})
    except _Interrupted:
        raise
    except Exception as e:  # noqa: BLE001 - Spark start-up errors come in many types
        raise _fail(f"spark.master {cfg.spark.master!r}: could not start Spark: {_spark_error_line(e)}") from None
    signals.install()
    signals.spark_up = True
    try:
        from lowwater.io.s3 import configure

        configure(spark, cfg)  # [spark.s3] on a session that was already running too
        engine = Engine(cfg, spark, after_drain=after_drain, observers=Observers(cfg))
        signals.engine = engine
        if signals.signum is not None:
            raise _Interrupted(signals.signum)
        before = engine.store.latest()
        files = _landed(cfg)
        _say(start_line(cfg, before, files, once, drain))
        if files == 0 and not once:
            _say(f"waiting for files in {_paths(cfg)}")
        board = (_serve_dashboard(cfg.output.path, dashboard_port, pipeline=cfg.observe.pipeline)
                 if dashboard_port is not None else None)
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
        line = line or refused_line(e)  # a sum beyond its type, a Parquet column Spark cannot read
        if line is None:
            from lowwater.runtime.session import jvm_ended

            ended = jvm_ended(e)  # py4j says only "connection refused" when the JVM is gone
            if ended is None:
                raise
            line = f"{ended}; the checkpoint holds the last committed step: run the same command to resume"
        raise _fail(line, 1) from None
    stopped = signals.signum is not None
    if board is not None:  # a run stopped by a signal does not wait for another one
        _keep_serving(board, cfg.output.path, wait=not stopped, pipeline=cfg.observe.pipeline)
    if once and not stopped and manifest.step == before.step:
        _say(f"nothing new in {_paths(cfg)} since step {before.step}: outputs unchanged")
    summary = engine.summary(manifest)  # also when stopped: what the checkpoint holds (README, Stopping)
    if once:
        from lowwater.report import print_summary

        print_summary(out, summary, cfg.output.path)
    else:
        out.print(json.dumps(summary))
    if stopped:
        from lowwater.report import stop_line

        _say(stop_line(signal.Signals(signals.signum).name, manifest.step, engine.control.abandoned))
        raise typer.Exit(128 + signals.signum)
