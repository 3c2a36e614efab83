"""The Python API: ``import lowwater as lw``, a pipeline built in Spark's style over any streaming DataFrame.

::

    query = (lw.stream(df, event_time="event_time")
             .watermark(lw.bounded("5s").with_idleness("1m"))
             .window(lw.tumbling("1 minute"), key="key")
             .agg(total=F.sum("amount"))
             .lateness(grace="10s")
             .write(lw.parquet("out"))
             .start())

* ``pipeline``  -- :func:`stream` and :class:`Pipeline` (builds the TOML file's model; ``to_toml``/``from_toml``);
* ``specs``     -- watermark strategies, window shapes, sinks;
* ``aggs``      -- Spark ``Column`` aggregates as ``func(column)``;
* ``args``      -- argument checks that name the argument;
* ``toml_text`` -- the configuration dict written as TOML;
* ``running``   -- the DataFrame as the engine's source, the query handle (imports pyspark);
* ``foreach``   -- ``foreach_batch``: the user's function as the last sink (imports pyspark);
* ``join``      -- ``.interval_join``: the ``[join]`` table of two named streams;
* ``tools``     -- ``whatif`` and ``reconcile`` over a pipeline object (the CLI's batch tools, in process).

Importing this package does not import pyspark: ``running`` and ``foreach``
are loaded by ``Pipeline.start``.
"""

from lowwater.api.pipeline import FROM_KAFKA, Pipeline, stream
from lowwater.api.specs import (
    Sink,
    Watermark,
    WindowShape,
    adaptive,
    bounded,
    delta,
    foreach_batch,
    hopping,
    parquet,
    postgres,
    punctuated,
    session,
    tumbling,
)
from lowwater.api.tools import reconcile, whatif

__all__ = [
    "FROM_KAFKA",
    "Pipeline",
    "Sink",
    "Watermark",
    "WindowShape",
    "adaptive",
    "bounded",
    "delta",
    "foreach_batch",
    "hopping",
    "parquet",
    "postgres",
    "punctuated",
    "reconcile",
    "session",
    "stream",
    "tumbling",
    "whatif",
]
