"""The ``lowwater`` Typer app and what every command shares: consoles, one-line failures, logging.

A wrong configuration prints one line naming the key and exits with code 2;
no Java stack trace reaches the terminal. Nothing the user wrote (paths,
column names, values) goes through rich markup: the consoles print text as
is, so ``[observe]`` is not swallowed as a style tag.
"""

from __future__ import annotations

import logging
import re
import sys
from contextlib import AbstractContextManager, nullcontext
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from lowwater import __version__

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


_READ_FILE = re.compile(r"error while reading file (\S+?)\.?\s")


def edited_file(error: BaseException) -> str | None:
    """The file Hadoop refused to read because it changed after it was written (its ``.crc`` no longer matches).

    An output edited by hand, or copied without its checksum, fails Spark's read
    with a ``ChecksumException`` deep in a Java stack; the commands that read
    outputs turn it into one line naming the file.
    """
    text = str(error)
    if "ChecksumException" not in text:
        return None
    found = _READ_FILE.search(text)
    return found.group(1) if found else "an output file"


def sum_overflow(error: BaseException) -> str | None:
    """What a job refused because a sum left its type says, in one line (None: not that).

    lowwater's own check (``spark/operators/windowed/executor.check_sum``: Arrow's int64 sum
    wraps around silently) names the column; Spark's ANSI check
    (``ARITHMETIC_OVERFLOW``) does not.
    """
    from lowwater.core.partials import COLLECTION_OVER
    from lowwater.spark.operators.windowed.executor import SUM_OVERFLOW

    text = str(error)
    for prefix in (SUM_OVERFLOW, COLLECTION_OVER):  # a collection past its bound (ADR 0034) says so the same way
        at = text.find(prefix)
        if at >= 0:
            return text[at:].splitlines()[0]
    for code in ("ARITHMETIC_OVERFLOW", "NUMERIC_VALUE_OUT_OF_RANGE"):  # a bigint's, a decimal's
        if code in text:
            return f"a sum left its type (Spark: {code}): give the value column a wider type or a double"
    return None


def _say(message: str) -> None:
    """One status line on stderr (stdout keeps the summary / JSON)."""
    err.print(Text(message))


def job_progress(spark, headline: str, quiet: bool) -> AbstractContextManager:  # noqa: ANN001
    """Live bars of Spark's stages while a batch analysis runs, on a terminal only (observe/jobs.py)."""
    if quiet or not err.is_terminal:
        return nullcontext()
    from lowwater.observe.jobs import SparkJobProgress

    return SparkJobProgress(spark, err, headline)


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



def replace_master(spark_cfg, master: str):  # noqa: ANN001, ANN201
    from dataclasses import replace

    return replace(spark_cfg, master=master)


