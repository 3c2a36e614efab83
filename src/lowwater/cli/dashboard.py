"""``lowwater dashboard`` and ``lowwater demo``: look at a run (live or finished), or see one on generated data."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from lowwater.cli.app import (
    _QUIET,
    _fail,
    _say,
    _setup_logging,
    out,
)
from lowwater.config import ConfigError


def _serve_dashboard(output_path: str, port: int, host: str = "127.0.0.1",  # noqa: ANN202 - a Dashboard
                     pipeline: str | None = None):
    from lowwater.observe.dashboard import Dashboard

    try:
        board = Dashboard(output_path, port=port, host=host, pipeline=pipeline)
    except OSError as e:
        raise _fail(f"--port {port}: cannot serve the dashboard on {host}:{port}: {e}") from None
    _say(f"dashboard: {board.url}")
    return board


def _keep_serving(board, output_path: str, wait: bool = True,  # noqa: ANN001 - a Dashboard
                  pipeline: str | None = None) -> None:
    """After a run: write the static report; on a terminal, keep the dashboard up until Ctrl-C."""
    from lowwater.observe.dashboard import write_report

    _say(f"report: {write_report(output_path, pipeline)}")
    if wait and sys.stdin.isatty():
        _say(f"dashboard of the finished run: {board.url} (Ctrl-C to stop)")
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    board.close()


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
    kafka: Annotated[bool, typer.Option("--kafka", help=(
        "Produce the stream into a local Kafka broker (8 partitions) and read it continuously; Ctrl-C stops."
    ))] = False,
    speed: Annotated[float, typer.Option(help="--kafka: seconds of arrival time produced per second.")] = 10.0,
    seconds: Annotated[float | None, typer.Option(help=(
        "--kafka: stop once the stream is produced and read, or after this many seconds."
    ))] = None,
) -> None:
    """Generate a realistic payments stream and run it through lowwater on local Spark.

    At the end it writes a static report (OUTPUT/report.html) and, when stdin
    is a terminal, serves the dashboard until Ctrl-C (not with --no-dashboard).
    With --kafka the stream goes through a local Kafka broker, read continuously
    with the per-partition watermarks logged each step (docs/kafka.md).
    """
    _setup_logging(not quiet)
    from lowwater.demo.runner import run_demo

    try:
        if kafka:
            from lowwater.demo.kafka import run_kafka_demo

            summary = run_kafka_demo(directory, duration_s=duration, rate_per_s=rate, speed=speed, run_for_s=seconds,
                                     master=master, console=out)
        else:
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


