"""A Delta table as a source: its data files in commit order, read from the table's own log.

``[source] format = "delta"`` reads an **append-only** Delta table as a
stream. Its arrival order is the table's: commit versions in order, and
within one commit (whose files arrive together) the files by name; each
file's rows in file order. The file log (``io/filelog.py``) records the
files in that order, each under a name that sorts in it,
``@<version, 20 digits>/<file>`` (Delta's own log names are 20-digit
versions), so positions map to the same files after a restart and a
micro-batch's rows sort by ``_file`` (:func:`order_key`) exactly as they
arrived: any cut of the commits into micro-batches gives the same results,
as with a landing directory.

What cannot be read in a fixed order is refused in one line
(:class:`DeltaSourceError`, exit 2): a commit that removes data (``DELETE``,
``UPDATE``, ``MERGE``, an overwrite; ``OPTIMIZE``'s rewrites, which change no
data, are skipped), deletion vectors, partitioned tables and column mapping
(the files alone do not hold the rows' values then), and a log whose first
commits were cleaned up (the order of their files is lost).
"""

from __future__ import annotations

import json
import re
from typing import Protocol
from urllib.parse import unquote

from lowwater.config import ConfigError

LOG_DIR = "_delta_log"
_COMMIT = re.compile(r"^(\d{20})\.json$")
_NAME = re.compile(r"^@(\d{20})/(.+)$")


class DeltaSourceError(ConfigError):
    """A Delta table the source cannot read in a fixed order (one line, exit 2)."""


class LogFiles(Protocol):
    """What the log reader needs from :class:`lowwater.runtime.fs.HadoopFS`."""

    def list_names(self, path: str) -> list[str]: ...
    def read_text(self, path: str) -> str: ...


def logged_name(version: int, path: str) -> str:
    """The file log's name of a data file added by commit ``version``: sorts by version, then file."""
    return f"@{version:020d}/{path}"


def split_name(name: str) -> tuple[int, str]:
    """(version, file path relative to the table) of a logged name."""
    m = _NAME.match(name)
    if m is None:
        msg = f"{name!r} is not a Delta source's logged file name"
        raise ValueError(msg)
    return int(m.group(1)), m.group(2)


def order_key(table: str, name: str) -> str:
    """``_file`` of a row from the logged file ``name``: the table, then the name (sorts in arrival order)."""
    return f"{table.rstrip('/')}{name}"


def commit_files(version: int, text: str, where: str) -> list[str]:
    """The data files commit ``version`` adds, by name; refuses what an append-only reading cannot follow."""
    added: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "metaData" in action:
            meta = action["metaData"]
            if meta.get("partitionColumns"):
                cols = ", ".join(meta["partitionColumns"])
                msg = (f"{where}: the Delta table is partitioned by {cols} (version {version}); a Delta source "
                       "reads unpartitioned tables")
                raise DeltaSourceError(msg)
            mode = (meta.get("configuration") or {}).get("delta.columnMapping.mode", "none")
            if mode != "none":
                msg = (f"{where}: the Delta table uses column mapping ({mode}, version {version}); a Delta source "
                       "reads tables whose files carry the column names")
                raise DeltaSourceError(msg)
        elif "add" in action and action["add"].get("dataChange", True):
            add = action["add"]
            if add.get("deletionVector"):
                msg = (f"{where}: version {version} adds a file with a deletion vector (rows deleted in place); "
                       "a Delta source reads append-only tables")
                raise DeltaSourceError(msg)
            path = unquote(add["path"])
            if "://" in path or path.startswith("/"):
                msg = f"{where}: version {version} adds a file outside the table ({path}); not supported"
                raise DeltaSourceError(msg)
            added.append(path)
        elif "remove" in action and action["remove"].get("dataChange", True):
            msg = (f"{where}: version {version} removes or rewrites rows (a DELETE, UPDATE, MERGE or overwrite); "
                   "a Delta source reads append-only tables, whose order of arrival is fixed")
            raise DeltaSourceError(msg)
    return sorted(added)


def new_files(fs: LogFiles, table: str, after: int, where: str) -> list[str]:
    """Logged names of the files of the commits after version ``after``, in order."""
    log_dir = f"{table.rstrip('/')}/{LOG_DIR}"
    versions = sorted(int(m.group(1)) for n in fs.list_names(log_dir) if (m := _COMMIT.match(n)))
    if after < 0 and versions and versions[0] != 0:
        msg = (f"{where}: the Delta table's log starts at version {versions[0]} (older commits were cleaned up), "
               "so the order in which its first files arrived is lost; read it from a table with its whole log")
        raise DeltaSourceError(msg)
    names: list[str] = []
    last = after
    for v in versions:
        if v <= after:
            continue
        if v != last + 1:  # a commit file not there yet (being written): stop before it, read it next time
            break
        text = fs.read_text(f"{log_dir}/{v:020d}.json")
        names += [logged_name(v, p) for p in commit_files(v, text, where)]
        last = v
    return names
