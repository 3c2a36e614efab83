"""A source's columns read before Spark starts: Parquet footers, CSV headers, the first JSON lines.

A configuration error that needs the input's columns (a missing column, a
``sum`` of a text column) should cost a second, not a JVM start. This module
reads what the files say without Spark -- the checkpoint's saved schema,
``source.schema``, Parquet footers (pyarrow), CSV header lines, JSON Lines
up to a budget -- and names each column's type as Spark would
(``DataType.simpleString``) where the files settle it, else None. The CLI
runs ``config/pipeline.check_columns`` on the result before Spark starts;
Spark's own schema goes through the same check later (``io/files.py``), so a
case this module cannot settle (a Kafka topic, a URL, an empty landing zone,
JSON beyond the budget) is checked there, as before.

Only what is certain refuses: a text value seen in a sample makes a column a
string whatever the rest holds (Spark widens to string), but numbers seen in
a sample prove nothing until every row was read (``complete``).
"""

from __future__ import annotations

import csv
import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from lowwater.config import PipelineConfig, SourceConfig
from lowwater.config.pipeline import check_columns, check_types

JSON_BUDGET_BYTES = 32 * 2**20  # JSON Lines read before Spark starts; beyond it the columns are not settled
MAX_FOOTERS = 200  # Parquet footers (or CSV headers) read; beyond that Spark decides
CSV_SAMPLE_ROWS = 1000  # CSV rows sampled per file for text columns
# A naive timestamp in text: a date and a time with no zone after it (``2013-01-01 20:45:00``).
NAIVE_TIME = re.compile(r"^\s*\d{4}-\d{2}-\d{2}([T ]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?)?\s*$")


@dataclass(frozen=True)
class Header:
    """A source's columns as far as its files settle them before Spark starts.

    ``columns``: name -> Spark type name, or None where only Spark can tell;
    ``complete``: every column is listed (a column not listed is missing);
    ``naive``: columns whose values are timestamps without a zone (text with
    no offset, or a Parquet timestamp not adjusted to UTC).
    """

    columns: dict[str, str | None]
    complete: bool
    naive: frozenset[str] = field(default_factory=frozenset)


def read_header(src: SourceConfig, saved: Path | None = None) -> Header | None:
    """The columns of ``src`` without Spark (None: only Spark can tell, e.g. a Kafka topic or a URL).

    ``saved``: the checkpoint's saved schema (``io/files.saved_schema``), which a run uses before anything else.
    """
    if src.kafka is not None:
        return None
    if saved is not None and saved.exists():
        try:
            return Header(_spark_json_columns(json.loads(saved.read_text())), complete=True)
        except (ValueError, KeyError, TypeError):
            return None
    if src.schema:
        cols = parse_ddl(src.schema)
        return None if cols is None else Header(cols, complete=True)
    if "://" in src.path or any(c in src.path for c in "*?[{"):
        return None
    files = landing(Path(src.path))
    if not files:
        return None
    reader = {"parquet": _parquet, "delta": _parquet, "csv": _csv, "jsonl": _jsonl}.get(src.format)
    if reader is None:  # a registered source kind (io/source.py): its columns are known once Spark runs
        return None
    header = reader(files)
    if header is None:
        return None
    parts = _partition_columns(Path(src.path), files)
    if parts:
        header = Header({**header.columns, **dict.fromkeys(parts)}, header.complete, header.naive)
    return header


def landing(root: Path) -> list[Path]:
    """The files Spark's file source reads under ``root``, in name order (``_``/``.`` names skipped)."""
    if root.is_file():
        return [root]
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*") if p.is_file()
                  and not any(part.startswith(("_", ".")) for part in p.relative_to(root).parts))


def landing_files(path: str) -> int | None:
    """How many files the file source would see under a local ``path`` (None for a URL)."""
    return None if "://" in path else len(landing(Path(path)))


def source_state_dir(state_dir: str, name: str) -> str:
    """Where one named source keeps its file log and saved schema."""
    return f"{state_dir.rstrip('/')}/sources/{name}"


def saved_schema(state_dir: str) -> Path | None:
    """Where the checkpoint keeps the inferred input schema (local checkpoints only)."""
    return Path(state_dir, "source_schema.json") if "://" not in state_dir else None


def saved_schema_of(cfg: PipelineConfig, src: SourceConfig) -> Path | None:
    """Where the checkpoint of ``cfg`` keeps ``src``'s inferred schema (None: not a local checkpoint)."""
    lw_dir = f"{cfg.output.checkpoint.rstrip('/')}/lowwater"
    return saved_schema(source_state_dir(lw_dir, src.name) if cfg.named_sources else lw_dir)


def _partition_columns(root: Path, files: list[Path]) -> list[str]:
    """Columns of ``k=v`` directories (Spark adds them to every row)."""
    if root.is_file():
        return []
    names: dict[str, None] = {}
    for f in files:
        for part in f.relative_to(root).parts[:-1]:
            if "=" in part:
                names[part.split("=", 1)[0]] = None
    return list(names)


# -- Spark's type names -----------------------------------------------------------------------

_DDL_ALIASES = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint", "real": "float",
                "bool": "boolean", "text": "string"}


def parse_ddl(ddl: str) -> dict[str, str] | None:
    """``"a STRING, b DECIMAL(12, 2)"`` -> ``{"a": "string", "b": "decimal(12,2)"}`` (None: not plain DDL)."""
    out: dict[str, str] = {}
    for item in _split_top(ddl):
        m = re.match(r"^\s*(`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)\s*:?\s+(.+?)\s*(NOT\s+NULL)?\s*$", item, re.IGNORECASE)
        if not m or "comment" in m.group(2).lower():
            return None
        name = m.group(1).strip("`")
        typ = re.sub(r"\s+", "", m.group(2)).lower()
        base = typ.split("(", 1)[0].split("<", 1)[0]
        out[name] = _DDL_ALIASES.get(base, base) + typ[len(base):]
    return out or None


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses and angle brackets."""
    parts, depth, cur = [], 0, []
    for ch in text:
        depth += ch in "(<"
        depth -= ch in ")>"
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


def _spark_json_type(t: object) -> str:
    """A type in Spark's JSON schema (``StructType.jsonValue``) as its ``simpleString``, shallowly."""
    if isinstance(t, str):
        return t
    return str(t["type"]) if isinstance(t, dict) else "unknown"  # array, map, struct


def _spark_json_columns(schema: dict) -> dict[str, str | None]:
    return {f["name"]: _spark_json_type(f["type"]) for f in schema["fields"]}


def _arrow_type(t) -> str | None:  # noqa: ANN001 - a pyarrow DataType
    import pyarrow as pa

    simple = {pa.int8(): "tinyint", pa.int16(): "smallint", pa.int32(): "int", pa.int64(): "bigint",
              pa.float32(): "float", pa.float64(): "double", pa.string(): "string", pa.large_string(): "string",
              pa.bool_(): "boolean", pa.date32(): "date", pa.binary(): "binary", pa.large_binary(): "binary"}
    if t in simple:
        return simple[t]
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return None if t.unit == "ns" else "timestamp" if t.tz else "timestamp_ntz"  # ns: Spark refuses
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return "array"
    if pa.types.is_map(t):
        return "map"
    if pa.types.is_struct(t):
        return "struct"
    return None


# -- the formats --------------------------------------------------------------------------------


def _parquet(files: list[Path]) -> Header | None:
    """The first footer's columns (Spark reads one footer); complete when every footer read agrees."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schemas = []
    for f in files[:MAX_FOOTERS]:
        try:
            schemas.append(pq.read_schema(f))
        except (OSError, pa.ArrowInvalid):
            return None  # not Parquet, or unreadable: Spark says what is wrong
    first = schemas[0]
    same = len(files) <= MAX_FOOTERS and all(s.names == first.names for s in schemas)
    naive = frozenset(f.name for f in first if pa.types.is_timestamp(f.type) and f.type.tz is None)
    return Header({f.name: _arrow_type(f.type) for f in first}, complete=same, naive=naive)


def _csv(files: list[Path]) -> Header | None:
    """The first file's header (Spark's names); a column with a value that is no number, date or boolean is text."""
    headers, samples = [], {}
    for f in files[:MAX_FOOTERS]:
        try:
            with _open(f) as fh:
                rows = csv.reader(fh)
                head = next(rows, None)
                if head is None:
                    continue
                headers.append(head)
                for i, row in enumerate(rows):
                    if i >= CSV_SAMPLE_ROWS:
                        break
                    for name, value in zip(head, row, strict=False):
                        samples.setdefault(name, []).append(value)
        except (OSError, UnicodeDecodeError, csv.Error):
            return None
    if not headers:
        return None
    first = headers[0]
    if len({c.lower() for c in first}) != len(first):  # Spark renames duplicate headers: let it
        return None
    same = len(files) <= MAX_FOOTERS and all(h == first for h in headers)
    cols = {c: ("string" if any(_text_only(v) for v in samples.get(c, [])) else None) for c in first}
    naive = frozenset(c for c in first if any(NAIVE_TIME.match(v) for v in samples.get(c, [])[:50]))
    return Header(cols, complete=same, naive=naive)


def _text_only(value: str) -> bool:
    """A CSV value Spark can only read as a string (no number, boolean, date or timestamp)."""
    v = value.strip()
    if not v:
        return False
    try:
        float(v)
        return False
    except ValueError:
        pass
    return v.lower() not in ("true", "false") and not re.match(r"^\d{4}-\d{2}-\d{2}", v)


def _jsonl(files: list[Path]) -> Header | None:
    """Keys and value kinds of JSON Lines, up to :data:`JSON_BUDGET_BYTES`; complete if every line was read."""
    kinds: dict[str, set[str]] = {}
    naive: set[str] = set()
    budget = JSON_BUDGET_BYTES
    complete = True
    for f in files:
        if budget <= 0:
            complete = False
            break
        try:
            with _open(f) as fh:
                for line in fh:
                    budget -= len(line)
                    if budget <= 0:
                        complete = False
                        break
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except ValueError:
                        continue  # a malformed line: a dead letter, no columns
                    # Spark reads a line holding an array of objects as one row per object.
                    for obj in row if isinstance(row, list) else [row]:
                        if not isinstance(obj, dict):
                            continue
                        for k, v in obj.items():
                            kinds.setdefault(k, set()).add(type(v).__name__)
                            if isinstance(v, str) and k not in naive and NAIVE_TIME.match(v):
                                naive.add(k)
        except (OSError, UnicodeDecodeError):
            return None
    if not kinds:
        return None
    return Header({k: _json_type(ks, complete) for k, ks in kinds.items()}, complete, frozenset(naive))


def _json_type(kinds: set[str], complete: bool) -> str | None:
    """Spark's inferred type of a JSON key from the kinds of its values (a string anywhere: string)."""
    if "str" in kinds:
        return "string"
    if not complete:
        return None
    kinds = kinds - {"NoneType"}
    by_kinds = {frozenset(): "string", frozenset({"bool"}): "boolean", frozenset({"int"}): "bigint",
                frozenset({"float"}): "double", frozenset({"int", "float"}): "double",
                frozenset({"dict"}): "struct", frozenset({"list"}): "array"}
    return by_kinds.get(frozenset(kinds))


def _open(path: Path):  # noqa: ANN202 - a text file object
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return path.open(encoding="utf-8", newline="")


def check_before_spark(cfg: PipelineConfig, saved: bool = True) -> dict[str, Header]:
    """``check_columns`` on every source whose columns the files settle, before Spark starts (one line, exit 2).

    ``saved``: a checkpoint's saved schema comes first, as a run reads it (a
    what-if replay infers from the files: False). A source whose columns are
    not all known gets the type check alone; one that only Spark can read is
    left to the check on Spark's schema. Returns the headers read (their
    ``naive`` columns feed the time-zone warning).
    """
    headers = {}
    for src in cfg.sources:
        header = read_header(src, saved_schema_of(cfg, src) if saved else None)
        if header is None:
            continue
        headers[src.name] = header
        if header.complete:
            check_columns(cfg, {src.name: header.columns})
        else:
            check_types(cfg, src, header.columns)
    return headers


def naive_clock_warning(cfg: PipelineConfig, headers: dict[str, Header]) -> str | None:
    """One line when an event or arrival time column holds timestamps without a zone and no ``time_zone`` is set."""
    found = []
    for src in cfg.sources:
        header = headers.get(src.name)
        if header is None or src.time_zone is not None:
            continue
        cols = [c for c in (src.event_time, src.arrival_time) if c and c in header.naive]
        found += [f"{c!r}" + (f" of source {src.name!r}" if src.named else "") for c in cols]
    if not found:
        return None
    key = "source.<name>.time_zone" if cfg.named_sources else "source.time_zone"
    return (f"{key} is not set: {', '.join(found)} hold{'s' if len(found) == 1 else ''} timestamps without a zone, "
            f"read as UTC; set {key} to the zone they were written in (e.g. \"America/New_York\")")
