"""What a Parquet log's footers prove without reading a row: which columns hold no null.

Every Parquet writer records each column chunk's ``null_count``. When every
row group of every file says 0 for a column, a check that fires only on a
null of that column can never fire, so a batch job (``lowwater reconcile``)
drops the check and Spark does not read the column at all: at 10 M rows the
three order columns' null checks were a quarter of the scan
(docs/performance.md). A file without statistics for the column, a column
missing from a file (Spark fills it with nulls), a column that is also a
``name=value`` directory (Spark takes the directory's value), a footer that
cannot be read, a file not on the local file system (an object store's
credentials and region lookups could cost more than they save) or too many
files: nothing is proven and every check stays.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import pyarrow.parquet as pq

from lowwater.io.files import file_path

# Above this many files the footers would cost the driver more than the columns cost the executors.
MAX_FILES = 2_000


def _null_free(uri: str, columns: tuple[str, ...]) -> set[str]:
    """The ``columns`` the footer of one file proves null-free."""
    md = pq.read_metadata(file_path(uri))
    index = {md.schema.column(i).path: i for i in range(md.num_columns)}
    free = set()
    for c in columns:
        i = index.get(c)
        if i is None:
            continue
        ok = True
        for g in range(md.num_row_groups):
            stats = md.row_group(g).column(i).statistics
            if stats is None or not stats.has_null_count or stats.null_count != 0:
                ok = False
                break
        if ok:
            free.add(c)
    return free


def null_free(files: list[str], columns: list[str | None]) -> frozenset[str]:
    """The ``columns`` that hold no null in any of ``files`` (Parquet URIs), by their footers alone."""
    # A partition directory (``/partition=3/``) gives the column its value, whatever the file holds.
    wanted = tuple(dict.fromkeys(c for c in columns if c and not any(f"/{c}=" in file_path(f) for f in files)))
    local = all(urlsplit(f).scheme in ("", "file") for f in files)
    if not files or not wanted or len(files) > MAX_FILES or not local:
        return frozenset()
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            proven = list(pool.map(lambda f: _null_free(f, wanted), files))
    except Exception:  # noqa: BLE001 - an unreadable footer proves nothing; Spark then reads and checks the column
        return frozenset()
    return frozenset(set.intersection(*proven))
