"""``lowwater reconcile``: the batch truth against what the stream emitted, every difference explained.

Exit codes: 0 every difference explained, 1 at least one window unexplained
(the windows are named), 2 a bad configuration or option (one line).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lowwater.cli.app import _QUIET, _fail, _say, _setup_logging, _spark_error_line, edited_file, out, sum_overflow
from lowwater.config import ConfigError, load_config

UNEXPLAINED_EXIT = 1


def reconcile(
    config: Annotated[Path, typer.Argument(help="Pipeline configuration (TOML) whose outputs to reconcile.")],
    from_: Annotated[str | None, typer.Option("--from", help="Only windows starting at or after T (ISO or epoch s).")]
    = None,
    to: Annotated[str | None, typer.Option("--to", help="Only windows ending at or before T (ISO or epoch s).")] = None,
    apply: Annotated[
        bool, typer.Option("--apply", help="Write corrections (kind = correction) to the pipeline's sinks; "
                           "idempotent. Refused while a run holds the output path.")
    ] = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the summary as JSON.")] = None,
    plot_out: Annotated[Path | None, typer.Option("--plot", help="OUT.html: the difference over event time by cause.")]
    = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a key: section.key=value.")] = None,
    quiet: Annotated[bool, _QUIET] = False,
) -> None:
    """Recompute every window over the whole log and explain each difference from what the stream emitted."""
    _setup_logging(not quiet)
    from lowwater.reconcile.run import check, instant_us, reconciled

    try:
        cfg = load_config(config, set_ or [])
        check(cfg)  # what reconcile covers, a missing column: one line before the JVM starts
        from_us, to_us = instant_us("--from", from_), instant_us("--to", to)
        if plot_out is not None and plot_out.suffix != ".html":
            raise ConfigError(f"--plot {plot_out}: write .html")
    except ConfigError as e:
        raise _fail(str(e)) from None

    def start_spark(jars: list[str], conf: dict[str, str]):  # noqa: ANN202 - a SparkSession
        from lowwater.runtime.session import get_spark

        try:
            return get_spark(cfg.spark, quiet=quiet, jars=jars, conf=conf)
        except Exception as e:  # noqa: BLE001 - Spark start-up errors come in many types
            raise _fail(f"spark.master {cfg.spark.master!r}: could not start Spark: {_spark_error_line(e)}") from None

    from lowwater.reconcile import report
    from lowwater.reconcile.job import report_path

    try:
        # --apply: no run may write the outputs meanwhile; a running one makes this refuse (one line)
        with reconciled(cfg, from_us, to_us, apply, start_spark) as result:
            target = report_path(cfg)
            if plot_out is not None:  # under the lock: the plot reads reconcile/, which the next one overwrites
                measure = next((a.name for a in cfg.window.aggregations if a.func == "sum"), "count")
                report.plot(result.frame, plot_out, measure)
    except ConfigError as e:
        raise _fail(str(e)) from None
    except typer.Exit:
        raise
    except Exception as e:
        overflow = sum_overflow(e)
        if overflow is not None:  # the batch truth's sum beyond its type: one line, nothing written
            raise _fail(f"reconcile: {overflow}", UNEXPLAINED_EXIT) from None
        from lowwater.io.files import unreadable_parquet

        unreadable = unreadable_parquet(e)
        if unreadable is not None:  # a log file with a column Spark cannot read
            raise _fail(f"reconcile: {unreadable}", UNEXPLAINED_EXIT) from None
        changed = edited_file(e)
        if changed is None:
            raise
        msg = (f"{changed} changed after it was written (its .crc checksum no longer matches): an edited sink, "
               "or a copy that kept the old checksum")
        raise _fail(msg, UNEXPLAINED_EXIT) from None
    s = result.summary
    report.print_summary(out, s)
    if json_out is not None:
        report.write_json(json_out, s)
    _say(f"reconcile: {s['windows_differing']} differing window(s) of {s['windows_checked']} in {target}")
    if s["unexplained"]:
        raise typer.Exit(UNEXPLAINED_EXIT)
