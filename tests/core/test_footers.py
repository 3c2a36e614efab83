"""``io/footers.null_free``: a column is proven null-free only when every footer of every file says so."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lowwater.io.footers import null_free


def _file(path: Path, offsets: list[int | None], stats: bool = True, row_group_size: int = 2) -> str:
    table = pa.table({"offset": pa.array(offsets, pa.int64()), "key": pa.array(["a"] * len(offsets))})
    pq.write_table(table, path, write_statistics=stats, row_group_size=row_group_size)
    return path.as_uri()


def test_a_column_without_nulls_in_every_row_group_of_every_file_is_proven(tmp_path):
    files = [_file(tmp_path / "a.parquet", [1, 2, 3, 4, 5]), _file(tmp_path / "b.parquet", [6])]
    assert null_free(files, ["offset", "key"]) == {"offset", "key"}
    assert null_free([f.replace("file://", "") for f in files], ["offset"]) == {"offset"}  # plain paths too


def test_one_null_in_one_row_group_of_one_file_proves_nothing_for_that_column(tmp_path):
    files = [_file(tmp_path / "a.parquet", [1, 2, 3, 4]), _file(tmp_path / "b.parquet", [5, 6, 7, None])]
    assert null_free(files, ["offset", "key"]) == {"key"}  # the null is in b's second row group only


def test_no_statistics_a_missing_column_or_an_unreadable_footer_prove_nothing(tmp_path):
    good = _file(tmp_path / "a.parquet", [1, 2])
    assert null_free([good, _file(tmp_path / "b.parquet", [3], stats=False)], ["offset"]) == frozenset()
    assert null_free([good], ["offset", "partition"]) == {"offset"}  # no such column: Spark would read nulls
    (tmp_path / "c.parquet").write_bytes(b"not parquet")
    assert null_free([good, (tmp_path / "c.parquet").as_uri()], ["offset"]) == frozenset()
    assert null_free([], ["offset"]) == frozenset()
    assert null_free([good], [None, ""]) == frozenset()  # a source without the column asks for nothing


def test_a_partition_directory_a_remote_file_or_a_quoted_uri(tmp_path):
    """A column that is also a ``name=value`` directory takes the directory's value: not proven. Files off the
    local file system prove nothing. Spark's quoted URIs (a space as %20) are read."""
    (tmp_path / "offset=3").mkdir()
    hive = _file(tmp_path / "offset=3" / "a.parquet", [1, 2])
    assert null_free([hive], ["offset", "key"]) == {"key"}
    assert null_free(["s3://bucket/a.parquet"], ["offset"]) == frozenset()
    (tmp_path / "sp ace").mkdir()
    spaced = _file(tmp_path / "sp ace" / "a.parquet", [1])
    assert "%20" in spaced  # as Spark lists it
    assert null_free([spaced], ["offset"]) == {"offset"}
