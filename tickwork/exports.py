"""Dead-letter exports as JSON Lines, CSV or Parquet: the same columns, typed, in each.

The rows come from `tickwork.store.dead_letters.export_rows` (columns: `EXPORT_COLUMNS`). JSON Lines
writes times as ISO 8601 strings and `forks` as a list; CSV writes times as ISO 8601,
`forks` as ids separated by spaces and None as an empty field; Parquet keeps times as UTC
timestamps, numbers as numbers and `forks` as a list of strings. Parquet needs pyarrow:
`pip install 'tickwork[parquet]'`."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from enum import StrEnum
from typing import IO, Any

from tickwork.fsm.errors import ConfigurationError
from tickwork.fsm.values import utc_date

#: rows per Parquet row group: a few MB of dead letters, one group in memory at a time
ROW_GROUP = 1000
#: what asked for Parquet: the CLI's option or the API's query parameter
PARQUET_MISSING = (
    "{asked} needs pyarrow, which is not installed here: pip install 'tickwork[parquet]'"
)


class Format(StrEnum):
    JSONL = "jsonl"  #: JSON Lines, one object a line
    CSV = "csv"  #: comma-separated, with a header line
    PARQUET = "parquet"  #: Apache Parquet (needs pyarrow)

    @property
    def media_type(self) -> str:
        return MEDIA_TYPES[self]

    @property
    def binary(self) -> bool:
        return self is Format.PARQUET


MEDIA_TYPES = {
    Format.JSONL: "application/jsonl; charset=utf-8",
    Format.CSV: "text/csv; charset=utf-8",
    Format.PARQUET: "application/vnd.apache.parquet",
}


def columns(*, with_snapshot: bool = False) -> list[tuple[str, str]]:
    from tickwork.store.dead_letters import EXPORT_COLUMNS

    return [*EXPORT_COLUMNS, *([("snapshot", "json")] if with_snapshot else [])]


def check(fmt: Format, *, asked: str = "--format parquet", served: bool = False) -> None:
    """Refuse a format this installation cannot write, before anything is read or written;
    `served`: said to an API client, whose own machine is not the one that lacks it."""
    if fmt is Format.PARQUET:
        try:
            import pyarrow
            import pyarrow.parquet  # noqa: F401
        except ImportError:
            if served:
                raise ConfigurationError(
                    f"{asked} needs pyarrow, which is not installed on the tickwork server: "
                    "ask its operator to pip install 'tickwork[parquet]' there, or ask for "
                    "format=csv or format=jsonl"
                ) from None
            raise ConfigurationError(PARQUET_MISSING.format(asked=asked)) from None


def write(
    fmt: Format, rows: Iterable[dict[str, Any]], file: IO[Any], *, with_snapshot: bool = False
) -> int:
    """Write the rows to `file` (text for JSON Lines and CSV, binary for Parquet); how many."""
    check(fmt)
    cols = columns(with_snapshot=with_snapshot)
    if fmt is Format.JSONL:
        return _jsonl(rows, file, cols)
    if fmt is Format.CSV:
        return _csv(rows, file, cols)
    return _parquet(rows, file, cols)


def text_chunks(
    fmt: Format, rows: Iterable[dict[str, Any]], *, with_snapshot: bool = False
) -> Iterator[str]:
    """JSON Lines or CSV as text, a line at a time (for a streamed HTTP answer)."""
    cols = columns(with_snapshot=with_snapshot)
    names = [name for name, _ in cols]
    if fmt is Format.JSONL:
        for row in rows:
            yield json.dumps(_json_row(row, names), ensure_ascii=False) + "\n"
        return
    line = _Line()
    writer = csv.writer(line, lineterminator="\n")
    writer.writerow(names)
    yield line.take()
    for row in rows:
        writer.writerow(_csv_row(row, cols))
        yield line.take()


class _Line:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> None:
        self.parts.append(text)

    def take(self) -> str:
        text, self.parts = "".join(self.parts), []
        return text


def _json_row(row: dict[str, Any], names: list[str]) -> dict[str, Any]:
    return {n: utc_date(row[n]) if isinstance(row[n], datetime) else row[n] for n in names}


def _jsonl(rows: Iterable[dict[str, Any]], file: IO[str], cols: list[tuple[str, str]]) -> int:
    names = [name for name, _ in cols]
    n = 0
    for n, row in enumerate(rows, 1):  # noqa: B007
        file.write(json.dumps(_json_row(row, names), ensure_ascii=False) + "\n")
    return n


def _csv_value(value: Any, kind: str) -> Any:
    if value is None:
        return ""
    if kind == "time":
        return utc_date(value)
    if kind == "list":
        return " ".join(value)
    if kind == "json":
        return json.dumps(value, ensure_ascii=False)
    return value


def _csv_row(row: dict[str, Any], cols: list[tuple[str, str]]) -> list[Any]:
    return [_csv_value(row[name], kind) for name, kind in cols]


def _csv(rows: Iterable[dict[str, Any]], file: IO[str], cols: list[tuple[str, str]]) -> int:
    writer = csv.writer(file, lineterminator="\n")
    writer.writerow([name for name, _ in cols])
    n = 0
    for n, row in enumerate(rows, 1):  # noqa: B007
        writer.writerow(_csv_row(row, cols))
    return n


def _parquet(rows: Iterable[dict[str, Any]], file: IO[bytes], cols: list[tuple[str, str]]) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {
        "int": pa.int64(),
        "float": pa.float64(),
        "str": pa.string(),
        "time": pa.timestamp("us", tz="UTC"),
        "list": pa.list_(pa.string()),
        "json": pa.string(),
    }
    schema = pa.schema([pa.field(name, types[kind], nullable=name != "id") for name, kind in cols])
    n = 0
    with pq.ParquetWriter(file, schema, compression="zstd") as writer:
        batch: list[dict[str, Any]] = []
        for row in rows:
            batch.append(row)
            if len(batch) == ROW_GROUP:
                writer.write_table(_table(pa, schema, batch, cols))
                n, batch = n + len(batch), []
        if batch or not n:  # an empty export is still a file with the columns
            writer.write_table(_table(pa, schema, batch, cols))
            n += len(batch)
    return n


def _table(pa: Any, schema: Any, batch: list[dict[str, Any]], cols: list[tuple[str, str]]) -> Any:
    data = {
        name: [
            json.dumps(r[name], ensure_ascii=False) if kind == "json" else r[name] for r in batch
        ]
        for name, kind in cols
    }
    return pa.Table.from_pydict(data, schema=schema)
