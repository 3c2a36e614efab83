"""Where the stream is: its last committed step, its watermark, and which landed files it has read.

Read from the checkpoint, never from the outputs: the state manifest
(``spark/state.py``) is the single point of truth for "this step is done";
it names the Spark batch it came from, whose offset (``spark/offsets/<b>``)
is a position in the file log (``io/filelog.py``, ``io/landing.py``). The
files before that position have been read; the rest are *in flight*.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

from lowwater.config import ConfigError, PipelineConfig
from lowwater.runtime.fs import HadoopFS
from lowwater.time import NEG_INF, POS_INF

_MANIFEST = re.compile(r"^manifest-(\d{12})\.json$")


@dataclass(frozen=True)
class StreamPosition:
    """The stream's last committed step and what it had seen by then."""

    step: int
    watermark_us: int  # NEG_INF: undefined; POS_INF: drained
    drained: bool
    read_files: tuple[str, ...]  # paths (no scheme) of the landed files the stream has read
    landed_files: int  # files in the file log (read or not)

    def open_window(self) -> str:
        """SQL text: the window (``_we``, its end in µs) has not fired in the stream, ``end > W`` (every window
        while W is undefined): in flight as a whole, not compared."""
        return "true" if self.watermark_us <= NEG_INF else f"_we > {self.watermark_us}"


def stream_position(spark: SparkSession, cfg: PipelineConfig) -> StreamPosition:
    """The position of the pipeline whose checkpoint ``cfg`` names (a pipeline that never ran: step -1)."""
    fs = HadoopFS(spark)
    lw = f"{cfg.output.checkpoint.rstrip('/')}/lowwater"
    manifests = sorted(n for n in fs.list_names(f"{lw}/state") if _MANIFEST.match(n))
    if not manifests:
        return StreamPosition(-1, NEG_INF, False, (), 0)
    m = json.loads(fs.read_text(f"{lw}/state/{manifests[-1]}"))
    drained = bool(m.get("drained"))
    tracker = m.get("tracker") or {}
    watermark = POS_INF if drained else int(tracker.get("watermark_us", NEG_INF))
    names = _logged(fs, f"{lw}/files")
    position = _offset(fs, f"{cfg.output.checkpoint.rstrip('/')}/spark/offsets", int(m.get("spark_batch", -1)))
    base = cfg.source.path.rstrip("/")
    read = tuple(urlsplit(f"{base}/{n}").path for n in names[:position])
    return StreamPosition(int(m["step"]), watermark, drained, read, len(names))


def _logged(fs: HadoopFS, directory: str) -> list[str]:
    out: list[str] = []
    for name in fs.list_names(directory):
        if re.match(r"^\d{12}\.json$", name):
            out += [f["name"] for f in json.loads(fs.read_text(f"{directory}/{name}"))["files"]]
    return out


def _offset(fs: HadoopFS, directory: str, spark_batch: int) -> int:
    """The file-log position the Spark batch ``spark_batch`` read up to (0 before the first)."""
    if spark_batch < 0:
        return 0
    path = f"{directory}/{spark_batch}"
    if not fs.exists(path):
        msg = f"output.checkpoint: {path} is missing; the checkpoint is damaged or not lowwater's"
        raise ConfigError(msg)
    last = fs.read_text(path).strip().splitlines()[-1]
    try:
        return int(json.loads(last)["position"])
    except (ValueError, KeyError, TypeError):
        msg = f"output.checkpoint: {path} does not end with a file log position (a Kafka source is not supported)"
        raise ConfigError(msg) from None


def fired(window_end_us: int, position: StreamPosition) -> bool:
    """Has the stream fired a window ending at ``window_end_us`` (SEMANTICS.md §4: ``W >= end``)?"""
    return position.watermark_us > NEG_INF and window_end_us <= position.watermark_us
