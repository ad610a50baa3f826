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
FIELD_LIMIT = 2**31 - 1  # csv's default, 131,072 characters, refuses a long text

Row = dict[str, Any]


def table_format(path: Path, param: str, formats: Sequence[str] = TABLES) -> str:
    """The format of `path` by its suffixes (`.csv`, `.jsonl.gz`, ...) among `formats` (the text
    ones also gzipped); else a `ConfigError` naming `param`."""
    gzipped = path.name.endswith(".gz")  # as the readers unzip it: in lower case
    kind = Path(path.name.removesuffix(".gz")).suffix.lstrip(".").lower()
    if kind in formats and (not gzipped or kind != "parquet"):
        return kind
    known = [f".{f}" for f in formats] + [f".{f}.gz" for f in formats if f != "parquet"]
    raise ConfigError(f"{param}: {path}: not a known format; name a file ending in {known}")


def _columns_once(columns: Sequence[str], found: Sequence[str], where: str, param: str) -> None:
    """Each of `columns` once among `found` (a header, a schema), or one error naming it."""
    for column in columns:
        if found.count(column) != 1:
            how = "is twice" if column in found else "is not"
            raise DataFormatError(f"{where}: column {column!r} ({param}) {how} among {list(found)}")


def _delimited(
    path: Path, columns: Sequence[str], delimiter: str, param: str, optional: Sequence[str]
) -> Iterator[tuple[str, Row]]:
    quoting = csv.QUOTE_MINIMAL if delimiter == "," else csv.QUOTE_NONE
    lines = (line + "\n" for line in iter_lines(path))
    csv.field_size_limit(FIELD_LIMIT)  # a field as long as a line of a .txt file
    rows = csv.reader(lines, delimiter=delimiter, quoting=quoting, strict=True)
    try:
        header = next(rows, None)
        if header is None:
            raise DataFormatError(f"{path}: file is empty")
        _columns_once(columns, header, f"{path}:1", param)
        index = {c: header.index(c) for c in [*columns, *(c for c in optional if c in header)]}
        last, start = max(index.values()), rows.line_num
        for row in rows:
            where, start = f"{path}:{start + 1}", rows.line_num
            if not row:
                continue  # a blank line
            if len(row) <= last:
                short = next(c for c in index if index[c] >= len(row))
                raise DataFormatError(
                    f"{where}: {len(row)} fields, no {short!r} ({param}: field "
                    f"{index[short] + 1} of the header's {len(header)})"
                )
            if len(row) > len(header):  # an unquoted delimiter would cut a text short
                raise DataFormatError(
                    f"{where}: {len(row)} fields, the header has {len(header)} ({param}); "
                    + (
                        "quote a field that holds a comma"
                        if delimiter == ","
                        else "a TSV field holds no tab: one more, at a line's end too, is a field"
                    )
                )
            yield where, {c: row[i] for c, i in index.items()}
    except csv.Error as err:
        kind = "csv" if delimiter == "," else "tsv"
        raise DataFormatError(f"{path}:{rows.line_num}: not valid {kind}: {err}") from err


def _jsonl(
    path: Path, columns: Sequence[str], param: str, optional: Sequence[str]
) -> Iterator[tuple[str, Row]]:
    for lineno, line in enumerate(iter_lines(path), 1):
        if is_blank(line):
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as err:
            raise DataFormatError(f"{where}: not JSON: {err}") from err
        if not isinstance(row, dict):
            raise DataFormatError(f"{where}: a JSON {type(row).__name__}, not an object")
        missing = [c for c in columns if c not in row]
        if missing:
            raise DataFormatError(
                f"{where}: no key {missing[0]!r} ({param}); the row has {sorted(row)[:10]}"
            )
        yield where, {c: row[c] for c in [*columns, *(c for c in optional if c in row)]}


def _parquet(
    path: Path, columns: Sequence[str], param: str, optional: Sequence[str]
) -> Iterator[tuple[str, Row]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        raise DataFormatError(f"{path}: not a Parquet file: {err}") from err
    with table:
        names = table.schema_arrow.names
        _columns_once(columns, names, str(path), param)
        read = [*columns, *(c for c in optional if names.count(c) == 1)]
        row = 0
        batches = table.iter_batches(batch_size=PARQUET_BATCH, columns=read)
        while True:
            try:
                values = next(batches).to_pylist()
            except StopIteration:
                return
            except (pa.ArrowException, OSError, UnicodeDecodeError) as err:
                where = f"{path}: rows from {row + 1}"
                raise DataFormatError(f"{where}: damaged, or text not UTF-8: {err}") from err
            for record in values:
                row += 1
                yield f"{path}: row {row}", record


def read_rows(
    path: Path, columns: Sequence[str], param: str, optional: Sequence[str] = ()
) -> Iterator[tuple[str, Row]]:
    """Stream the `columns` of every row of a table file (and the `optional` ones where the file
    has them), with where each row is; a missing file is one error naming it and `param`."""
    if not path.is_file():
        raise DataFormatError(f"{path}: file not found ({param})")
    kind = table_format(path, param)
    if kind == "jsonl":
        return _jsonl(path, columns, param, optional)
    if kind == "parquet":
        return _parquet(path, columns, param, optional)
    return _delimited(path, columns, "," if kind == "csv" else "\t", param, optional)


def text_field(value: Any, where: str, column: str, param: str) -> str | None:
    """A row's text: a string, None for a null, else one error naming the row and column (also
    for a NUL or a lone surrogate, which no text file of the pipeline may hold)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise DataFormatError(
            f"{where}: column {column!r} ({param}) holds a {type(value).__name__}, not a string"
        )
    if "\0" in value:
        raise DataFormatError(f"{where}: NUL character in column {column!r} ({param})")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        reason = f"{where}: column {column!r} ({param}) is not Unicode text: {err.reason}"
        raise DataFormatError(reason) from err
    return value
