"""Rows of a user's table file, streamed: `.csv`, `.tsv`, `.jsonl`, `.parquet` (the text ones
also gzipped), each row the named columns, each with where it is (`file:line`, `file: row N`).

    for where, row in read_rows(Path("pairs.tsv"), ("sentence1", "sentence2"), "eval.own[0]"):
        ...

The text formats are read under `sentemb.data.readers`' line policy (a BOM dropped; CRLF and CR
end a line; not UTF-8 is an error naming the line). A CSV field may span lines (quoted); a TSV
field is never quoted, so it holds no tab. A blank line is skipped. A missing column, a JSON
line that is no object, a file that is no Parquet is one `DataFormatError` naming the file,
the line and `param` (the param that named the file or the column).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from sentemb.config import ConfigError
from sentemb.data.readers import DataFormatError, is_blank, iter_lines

TABLES = ("csv", "tsv", "jsonl", "parquet")
GZIPPED = ("csv", "tsv", "jsonl")  # parquet compresses itself
PARQUET_BATCH = 10_000

Row = dict[str, Any]


def table_format(path: Path, param: str, formats: Sequence[str] = TABLES) -> str:
    """The format of `path` by its suffixes (`.csv`, `.jsonl.gz`, ...) among `formats` (the text
    ones also gzipped); else a `ConfigError` naming `param`."""
    name = path.name.lower()
    gzipped = name.endswith(".gz")
    kind = Path(name.removesuffix(".gz")).suffix.lstrip(".")
    if kind in formats and (not gzipped or kind != "parquet"):
        return kind
    known = [f".{f}" for f in formats] + [f".{f}.gz" for f in formats if f != "parquet"]
    raise ConfigError(f"{param}: {path}: not a known format; name a file ending in {known}")


def _missing(where: str, columns: Sequence[str], found: Sequence[str], param: str) -> str:
    absent = [c for c in columns if c not in found]
    return f"{where}: no column {absent[0]!r} ({param}); it has {list(found)[:10]}"


def _delimited(
    path: Path, columns: Sequence[str], delimiter: str, param: str
) -> Iterator[tuple[str, Row]]:
    quoting = csv.QUOTE_MINIMAL if delimiter == "," else csv.QUOTE_NONE
    lines = (line + "\n" for line in iter_lines(path))
    rows = csv.reader(lines, delimiter=delimiter, quoting=quoting, strict=True)
    start = 1
    try:
        header = next(rows, None)
        if header is None:
            raise DataFormatError(f"{path}: file is empty")
        if any(c not in header for c in columns):
            raise DataFormatError(_missing(f"{path}:1", columns, header, param))
        index = {c: header.index(c) for c in columns}
        last = max(index.values())
        for row in rows:
            where, start = f"{path}:{start + 1}", rows.line_num
            if not row:
                continue  # a blank line
            if len(row) <= last:
                short = next(c for c in columns if index[c] >= len(row))
                raise DataFormatError(
                    f"{where}: {len(row)} fields, no {short!r} ({param}: field "
                    f"{index[short] + 1} of the header's {len(header)})"
                )
            yield where, {c: row[i] for c, i in index.items()}
    except csv.Error as err:
        kind = "csv" if delimiter == "," else "tsv"
        raise DataFormatError(f"{path}:{rows.line_num}: not valid {kind}: {err}") from err


def _jsonl(path: Path, columns: Sequence[str], param: str) -> Iterator[tuple[str, Row]]:
    for lineno, line in enumerate(iter_lines(path), 1):
        if is_blank(line):
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except ValueError as err:
            raise DataFormatError(f"{where}: not JSON: {err}") from err
        if not isinstance(row, dict):
            raise DataFormatError(f"{where}: a JSON {type(row).__name__}, not an object")
        if any(c not in row for c in columns):
            raise DataFormatError(_missing(where, columns, sorted(row), param))
        yield where, {c: row[c] for c in columns}


def _parquet(path: Path, columns: Sequence[str], param: str) -> Iterator[tuple[str, Row]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        raise DataFormatError(f"{path}: not a Parquet file: {err}") from err
    names = table.schema_arrow.names
    if any(c not in names for c in columns):
        raise DataFormatError(_missing(str(path), columns, names, param))
    row = 0
    for batch in table.iter_batches(batch_size=PARQUET_BATCH, columns=list(columns)):
        for values in batch.to_pylist():
            row += 1
            yield f"{path}: row {row}", values


def read_rows(path: Path, columns: Sequence[str], param: str) -> Iterator[tuple[str, Row]]:
    """Stream the `columns` of every row of a table file, with where each row is."""
    kind = table_format(path, param)
    if kind == "jsonl":
        return _jsonl(path, columns, param)
    if kind == "parquet":
        return _parquet(path, columns, param)
    return _delimited(path, columns, "," if kind == "csv" else "\t", param)


def text_field(value: Any, where: str, column: str, param: str) -> str | None:
    """A row's text: a string, None for a null, else an error naming the row and column."""
    if value is None or isinstance(value, str):
        return value
    raise DataFormatError(
        f"{where}: column {column!r} ({param}) holds a {type(value).__name__}, not a string"
    )
