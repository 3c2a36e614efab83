"""The ``lowwater`` command line: ``run`` a pipeline, or see it work on the ``demo``.

A wrong configuration prints one line naming the key and exits with code 2;
no Java stack trace reaches the terminal. Nothing the user wrote (paths,
column names, values) goes through rich markup: the consoles print text as
is, so ``[observe]`` is not swallowed as a style tag. Ctrl-C and SIGTERM stop
a run after its current step (exit 130 / 143, see :func:`run`).
"""

from __future__ import annotations

from lowwater.advisor.replay_config import input_format as _input_format
from lowwater.advisor.replay_config import replay_config as _replay_config
from lowwater.cli import advisor, dashboard, reconcile, run
from lowwater.cli.app import app

# One module per command group; registered here, in the order ``--help`` lists them.
for _command in (run.run, dashboard.dashboard, dashboard.demo, advisor.whatif, advisor.delays,
                 reconcile.reconcile):
    app.command()(_command)

__all__ = ["_input_format", "_replay_config", "app", "main"]


def main() -> None:
    """Entry point of the ``lowwater`` script."""
    app()
