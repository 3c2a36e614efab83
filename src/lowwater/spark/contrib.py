"""Executor side of a step: verdicts per (row, window), folded into partials.

Each task receives its rows with their row id, looks up ``W(r)`` and the
arrival sequence number in the broadcast from the driver, assigns windows and
classifies with the same core functions the driver used, and emits one frame:

* ``_kind = "P"``: on-time partial aggregates per (key, window) of this task;
* ``_kind = "L"``: one partial per late-update pair, with its ``_seq``;
* ``_kind = "T"``: one row per too-late pair, carrying the whole input row
  (``_in_<column>``) for the late output.

Aggregating inside the task keeps what crosses back from Python to the JVM
proportional to (keys x windows), not to rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd
from pyspark.sql import types as T

from lowwater.core.lateness import Lateness, classify
from lowwater.core.watermarks import clip_future
from lowwater.core.windows import WindowAssigner
from lowwater.spark.windowing import StateLayout

PAYLOAD = "_in_"


def contrib_schema(layout: StateLayout, payload: list[T.StructField] | None) -> T.StructType:
    """Schema of the frame :func:`make_contribute` yields."""
    state = layout.schema()
    fields = [f for f in state.fields if f.name not in ("_fired", "_rev")]
    fields += [
        T.StructField("_kind", T.StringType()),
        T.StructField("_seq", T.LongType()),
        T.StructField("_w", T.LongType()),
    ]
    fields += [T.StructField(PAYLOAD + f.name, f.dataType, True) for f in payload or []]
    return T.StructType(fields)


def make_contribute(
    layout: StateLayout,
    assigner: WindowAssigner,
    grace_us: int,
    max_future_skew_us: int | None,
    lookup,  # noqa: ANN001 - a Spark Broadcast of (rids, watermarks, seqs), sorted by rid
    payload: list[str] | None,
    has_arrival: bool,
) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """Build the ``mapInPandas`` function (a closure that pickles to the executors)."""
    keys = list(layout.keys)
    values = list(layout.values)
    cols = [c.name for c in contrib_schema(layout, None).fields]
    group_cols = [*keys, "window_start", "window_end"]
    payload_cols = [PAYLOAD + c for c in payload or []]

    def shaped(frame: pd.DataFrame) -> pd.DataFrame:
        out = frame.reindex(columns=cols)
        for c in payload_cols:
            # Rows without a payload carry nulls (object dtype: Arrow casts them to any type).
            out[c] = frame[c].to_numpy() if c in frame.columns else None
        return out

    def contribute(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        rids, ws, seqs = lookup.value
        on_frames, other = [], []
        for pdf in batches:
            if pdf.empty:
                continue
            rid = pdf["_rid"].to_numpy(dtype=np.int64)
            i = np.minimum(np.searchsorted(rids, rid), max(len(rids) - 1, 0))
            if len(rids) == 0 or not np.array_equal(rids[i], rid):
                msg = "row ids differ from the driver's plan: the micro-batch was not re-read identically"
                raise RuntimeError(msg)
            w, seq = ws[i], seqs[i]
            arrival = pdf["_arrival_us"].to_numpy(dtype=np.int64) if has_arrival else None
            event, _ = clip_future(pdf["_event_us"].to_numpy(dtype=np.int64), arrival, max_future_skew_us)
            pairs = assigner.assign(event)
            verdict = classify(pairs.end, w[pairs.row], grace_us)
            frame = pdf[keys].iloc[pairs.row].reset_index(drop=True)
            frame["window_start"] = pairs.start
            frame["window_end"] = pairs.end
            for j, v in enumerate(values):
                x = pd.to_numeric(pdf[v], errors="coerce").to_numpy(dtype=np.float64)[pairs.row]
                frame[f"_s{j}"] = x
                frame[f"_mn{j}"] = x
                frame[f"_mx{j}"] = x
                frame[f"_nn{j}"] = (~np.isnan(x)).astype(np.int64)
            frame["_n"] = np.int64(1)
            frame["_seq"] = seq[pairs.row]
            frame["_w"] = w[pairs.row]
            on = verdict == Lateness.ON_TIME
            on_frames.append(frame[on])
            late = frame[verdict == Lateness.LATE_UPDATE].assign(_kind="L")
            if len(late):
                other.append(late)
            too = verdict == Lateness.TOO_LATE
            if too.any():
                t = frame[too].assign(_kind="T")
                if payload:
                    src = pdf[payload].iloc[pairs.row[too]].reset_index(drop=True)
                    src.columns = [PAYLOAD + c for c in payload]
                    t = pd.concat([t.reset_index(drop=True), src], axis=1)
                other.append(t)
        if on_frames:
            allon = pd.concat(on_frames, ignore_index=True)
            if len(allon):
                agg = {"_n": "sum"}
                for j in range(len(values)):
                    agg.update({f"_s{j}": "sum", f"_mn{j}": "min", f"_mx{j}": "max", f"_nn{j}": "sum"})
                g = allon.groupby(group_cols, dropna=False, sort=False).agg(agg).reset_index()
                for j in range(len(values)):
                    # A window whose values are all null has a null sum, not 0.
                    g.loc[g[f"_nn{j}"] == 0, f"_s{j}"] = np.nan
                g["_kind"] = "P"
                g["_seq"] = np.int64(0)
                g["_w"] = np.int64(0)
                yield shaped(g)
        for o in other:
            yield shaped(o)

    return contribute
