"""The Python API: ``import lowwater as lw``, a pipeline built in Spark's style over any streaming DataFrame.

>>> import lowwater as lw
>>> from pyspark.sql import functions as F
>>> df = spark.readStream.format("rate").load()  # any streaming DataFrame: Kafka, files, Delta, ...
>>> pipeline = (lw.stream(df, event_time="timestamp", offset="value", arrival="timestamp")
...             .watermark(lw.bounded("5s").with_idleness("1m"))
...             .window(lw.tumbling("1 minute"))
...             .agg(total=F.sum("value"), biggest=F.max("value"))
...             .lateness(grace="10s")
...             .write(lw.parquet("/tmp/lowwater-out")))
>>> print(pipeline.to_toml())  # the same pipeline as a configuration file
[source]
format = "dataframe"
event_time = "timestamp"
offset = "value"
arrival_time = "timestamp"
time_unit = "s"
<BLANKLINE>
[watermark]
strategy = "bounded"
max_out_of_orderness = "5s"
idle_timeout = "1m"
<BLANKLINE>
[window]
type = "tumbling"
size = "1m"
key = []
aggregations = { total = "sum(value)", biggest = "max(value)" }
allowed_lateness = "10s"
<BLANKLINE>
[late]
policy = "side_output"
<BLANKLINE>
[output]
path = "/tmp/lowwater-out"
<BLANKLINE>

``query = pipeline.start(checkpoint=...)`` then runs it (README, "Python API").
The examples in these docstrings run as tests (tests/test_api_docs.py; those
needing a session, tests/spark/test_api.py).

* ``pipeline``  -- :class:`Pipeline` (builds the TOML file's model; ``to_toml``/``from_toml``);
* ``stream``    -- :func:`stream`: a DataFrame's column roles (a Kafka DataFrame's by default);
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

from lowwater.api.pipeline import Pipeline
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
from lowwater.api.stream import stream
from lowwater.api.tools import reconcile, whatif

__all__ = [
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
