"""The ``lowwater`` command line: ``run`` a pipeline, or see it work on the ``demo``.

A wrong configuration prints one line naming the key and exits with code 2;
no Java stack trace reaches the terminal.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from lowwater.config import ConfigError, load_config

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="lowwater: event-time stream processing you can trust, on Apache Spark.",
)
err = Console(stderr=True)
out = Console()


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("lowwater").setLevel(logging.INFO if verbose else logging.WARNING)
    logging.getLogger("py4j").setLevel(logging.ERROR)


def _spark_error_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


@app.command()
def run(
    config: Annotated[Path, typer.Argument(help="Pipeline configuration (TOML).")],
    once: Annotated[bool, typer.Option("--once", help="Process what is available, then stop.")] = False,
    drain: Annotated[
        bool,
        typer.Option("--drain", help="At the end of bounded input, W = +inf: fire every open window (implies --once)."),
    ] = False,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a key: section.key=value (repeatable).")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No per-step log lines.")] = False,
) -> None:
    """Run a pipeline as a Spark Structured Streaming query."""
    _setup_logging(not quiet)
    try:
        cfg = load_config(config, set_ or [])
    except ConfigError as e:
        raise _fail(str(e)) from None
    from lowwater.spark.engine import Engine
    from lowwater.spark.session import get_spark

    try:
        spark = get_spark(cfg.spark)
    except Exception as e:  # noqa: BLE001 - Spark start-up errors come in many types
        raise _fail(f"spark.master {cfg.spark.master!r}: could not start Spark: {_spark_error_line(e)}") from None
    try:
        engine = Engine(cfg, spark)
        manifest = engine.run(once=once or drain, drain=drain)
    except ConfigError as e:
        raise _fail(str(e)) from None
    except KeyboardInterrupt:
        raise _fail("interrupted; the checkpoint resumes where it stopped", 130) from None
    summary = engine.summary(manifest)
    if once or drain:
        from lowwater.report import print_summary

        print_summary(out, summary, cfg.output.path)
    else:
        out.print(json.dumps(summary))


@app.command()
def demo(
    directory: Annotated[Path, typer.Option("--dir", help="Where to write the demo landing zone and outputs.")] = Path(
        "demo-run"
    ),
    duration: Annotated[float, typer.Option(help="Seconds of event time to generate.")] = 600.0,
    rate: Annotated[float, typer.Option(help="Events per second of event time.")] = 200.0,
    master: Annotated[str, typer.Option(help="Spark master.")] = "local[*]",
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
) -> None:
    """Generate a realistic payments stream and run it through lowwater on local Spark."""
    _setup_logging(not quiet)
    from lowwater.demo.runner import run_demo

    try:
        run_demo(directory, duration_s=duration, rate_per_s=rate, master=master, console=out)
    except ConfigError as e:
        raise _fail(str(e)) from None


def main() -> None:
    """Entry point of the ``lowwater`` script."""
    app()


if __name__ == "__main__":
    main()
