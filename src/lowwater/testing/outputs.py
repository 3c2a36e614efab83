"""Read a pipeline's output folder into pandas for tests, as ``spark.read.parquet(path).toPandas()`` gives it.

A Spark read costs a listing, a schema job and a collect (~0.3-1 s each, four
per scenario run); the outputs are small local Parquet folders, so pyarrow
reads them in milliseconds. The frame is converted with PySpark's own
Arrow-to-pandas conversion (the one ``toPandas`` applies), from the Spark
types the Parquet files map to, with ``batch_id`` the integer partition
column Spark infers: the same columns, dtypes and values (row order is not
defined by either reader). A path Spark reads through Hadoop (not a local
folder) is read by Spark.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

__all__ = ["read_output"]


def read_output(spark, path: str | Path) -> pd.DataFrame:  # noqa: ANN001
    """The Parquet output folder ``path`` (``<kind>/batch_id=<step>/...``) as Spark's ``toPandas`` gives it."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    from pyspark.sql import types as T
    from pyspark.sql.pandas.conversion import _convert_arrow_table_to_pandas
    from pyspark.sql.pandas.types import from_arrow_type

    folder = Path(path)
    if not folder.is_dir():
        return spark.read.parquet(str(path)).toPandas()
    partitioning = ds.partitioning(pa.schema([("batch_id", pa.int32())]), flavor="hive")
    table = ds.dataset(folder, format="parquet", partitioning=partitioning).to_table()
    schema = T.StructType([T.StructField(f.name, from_arrow_type(f.type), True) for f in table.schema])
    tz = spark.conf.get("spark.sql.session.timeZone")
    return _convert_arrow_table_to_pandas(table, schema, timezone=tz, struct_handling_mode="legacy",
                                          date_as_object=True)
