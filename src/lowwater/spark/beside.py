"""What a step writes beside its operator: dead letters and the rows held behind the arrival frontier.

They depend on nothing the operator does, so they are written side by side with it
(``runtime/jobs.Background``), all finished before the commit; an operator that
writes its own outputs in one Spark job (``writes_beside``, ``spark/fused_write.py``)
is handed them instead, to write in that job.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame

from lowwater.io.outputs import ParquetOutputs
from lowwater.io.sink import Sinks
from lowwater.runtime.fs import HadoopFS
from lowwater.runtime.jobs import Background
from lowwater.spark.fused_write import Output, writable
from lowwater.spark.inputs import Inputs
from lowwater.spark.step import StepPlan


@dataclass
class Beside:
    """The step's outputs beside the operator: those handed to it, and those being written now."""

    given: list[Output] = field(default_factory=list)  # for an operator that writes them in its one job
    jobs: list[Background] = field(default_factory=list)  # written side by side with the operator
    held_job: Background | None = None
    held_entry: dict | None = None  # the held rows' manifest entry when the operator writes them

    def join(self) -> None:
        """Wait for every write (never leave one running behind a failed step)."""
        for job in self.jobs:
            job.join()

    def held(self) -> dict | None:
        """The held rows' manifest entry (None: none held); raises what a write raised."""
        for job in self.jobs:
            job.result()
        return self.held_job.result() if self.held_job is not None else self.held_entry


def start_beside(
    inputs: Inputs, sinks: Sinks, outputs: ParquetOutputs, fs: HadoopFS, parsed: DataFrame, plan: StepPlan, step: int,
    takes: bool,
) -> Beside:
    """Start the dead letters' and held rows' writes of ``step``, or hand them to the operator (``takes``)."""
    out = Beside()
    dead_path = outputs.path("dead_letter", step)
    if plan.dead and takes and sinks.single and writable(fs, dead_path):
        out.given.append(Output(inputs.dead(parsed), dead_path))
    elif plan.dead:
        out.jobs.append(Background(lambda: sinks.write("dead_letter", step, inputs.dead(parsed))))
    else:
        sinks.clear("dead_letter", step)
    fused_held = inputs.held_output(fs, parsed, plan.ready_bounds, step, plan.held) if takes else None
    if fused_held is not None:
        out.given.append(fused_held[0])
        out.held_entry = fused_held[1]
    else:
        out.held_job = inputs.hold(parsed, plan.ready_bounds, step, plan.held)  # HeldRows.write
        out.jobs += [out.held_job] if out.held_job is not None else []
    return out
