"""Which file sources have landed, unread files at a step: their part of the arrival frontier's ``logs``.

A source with files landed and waiting is not silent, so it must not go idle
by its ``idle_timeout`` only because Spark gave another source more of the
arrival clock in this micro-batch (issue 31; ``core/frontier.py``). A
micro-batch ends, per file source, at the file log position Spark wrote to
``<checkpoint>/spark/offsets/<batch>`` before running it (``{"position": n}``,
one line per source of the query, in the order ``io/sources.UnionSource``
unions them: the file sources in configuration order; a Kafka source's line
has another shape). The source is *caught up* when that end reaches the
length of its file log when the step runs (``landed``): a file logged since
Spark planned the batch counts as unread, so a source is never taken for
caught up while it has input waiting. The same offsets file a replay reads,
as for Kafka (``io/kafka_logs.py``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from lowwater.config import PipelineConfig
from lowwater.runtime.fs import HadoopFS

log = logging.getLogger("lowwater")


def file_positions(text: str) -> list[int]:
    """The file log positions in an offsets file of Spark's checkpoint, in the file's (the query's) order."""
    out = []
    for line in text.splitlines()[2:]:
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and set(data) == {"position"}:
            out.append(int(data["position"]))
    return out


class FileBacklogs:
    """Per step, ``{file source: caught up}`` for the file sources of a ``[[source]]`` pipeline."""

    def __init__(self, fs: HadoopFS, cfg: PipelineConfig) -> None:
        self.fs = fs
        self.names = [s.name for s in cfg.sources if s.kafka is None]
        self.offsets_dir = f"{cfg.output.checkpoint.rstrip('/')}/spark/offsets"

    def logs(self, spark_batch: int, landed: Mapping[str, int]) -> dict[str, bool]:
        """Each file source: its batch reached the end of its log (``landed``: the logs' lengths now).

        Empty when the batch's offsets are not in the checkpoint (a step run
        without Spark's query, as some tests do): nothing is known, nothing held back.
        """
        path = f"{self.offsets_dir}/{spark_batch}"
        ends = file_positions(self.fs.read_text(path)) if self.fs.exists(path) else []
        if len(ends) != len(self.names) or set(landed) != set(self.names):
            if ends:
                log.debug("offsets %s: %d file positions for sources %s", path, len(ends), self.names)
            return {}
        return {name: end >= landed[name] for name, end in zip(self.names, ends, strict=True)}
