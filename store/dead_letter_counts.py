"""Dead letters counted per UTC day and value of each grouping, and over all time, so `dlq
stats` reads a row per value (without `since`) or per value and day (from `since` on)
instead of counting every dead letter.

The counts change in the transactions that change the table: `add` where a dead letter is
recorded, `forget` where retention deletes them; `rebuild` counts the table afresh (the
migration's backfill, and the benchmark after its COPY).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Date,
    and_,
    bindparam,
    cast,
    delete,
    false,
    func,
    insert,
    literal,
    select,
    text,
    true,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from tickwork.store.schema import dead_letter_counts as counts
from tickwork.store.schema import dead_letter_totals as totals_table
from tickwork.store.schema import dead_letters

GROUPS = ("code", "kind", "model", "last_tool", "error_signature")
#: values whose latest dead letter one statement looks up (SQLite allows 500 compound terms)
LATEST_BATCH = 200

_KEY = ("tenant", "grouping", "day", "is_null", "value")
_TOTAL_KEY = ("tenant", "grouping", "is_null", "value")


def add(conn: Connection, letter: Mapping[str, Any]) -> None:
    """Count the dead letter `letter` (its column values) being inserted in `conn`'s
    transaction: one upsert of a row per grouping, always in GROUPS order (as `forget`
    locks them), so two transactions never wait for each other in a cycle."""
    day = letter["at"].astimezone(UTC).date()
    rows = [_row(letter["tenant"], day, by, letter[by], 1) for by in GROUPS]
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    for table, key in ((counts, _KEY), (totals_table, _TOTAL_KEY)):  # as `forget` locks them
        upsert = dialect.insert(table)
        conn.execute(
            upsert.values(
                [{k: row[k] for k in (*key, "count")} for row in rows]
            ).on_conflict_do_update(
                index_elements=list(key), set_={"count": table.c.count + upsert.excluded.count}
            )
        )


def forget(conn: Connection, session_ids: Sequence[str]) -> None:
    """Uncount the dead letters of `session_ids`, in the transaction that deletes them."""
    found = conn.execute(
        select(
            dead_letters.c.tenant, dead_letters.c.at, *(dead_letters.c[by] for by in GROUPS)
        ).where(dead_letters.c.session_id.in_(session_ids))
    ).mappings()
    tally: Counter[tuple[str, int, date, bool, str]] = Counter()
    for letter in found:
        day = letter["at"].astimezone(UTC).date()
        for i, by in enumerate(GROUPS):
            value = letter[by]
            tally[(letter["tenant"], i, day, value is None, value or "")] += 1
    if not tally:
        return
    params = [
        {"t": tenant, "d": day, "g": GROUPS[i], "z": is_null, "v": value, "n": n}
        for (tenant, i, day, is_null, value), n in sorted(tally.items())
    ]
    key = and_(
        counts.c.tenant == bindparam("t"),
        counts.c.day == bindparam("d"),
        counts.c.grouping == bindparam("g"),
        counts.c.is_null == bindparam("z"),
        counts.c.value == bindparam("v"),
    )
    conn.execute(update(counts).where(key).values(count=counts.c.count - bindparam("n")), params)
    conn.execute(delete(counts).where(key, counts.c.count <= 0), [{**p, "n": 0} for p in params])
    overall: Counter[tuple[str, int, bool, str]] = Counter()
    for (tenant, i, _day, is_null, value), n in tally.items():
        overall[(tenant, i, is_null, value)] += n
    params = [
        {"t": tenant, "g": GROUPS[i], "z": is_null, "v": value, "n": n}
        for (tenant, i, is_null, value), n in sorted(overall.items())
    ]
    key = and_(
        totals_table.c.tenant == bindparam("t"),
        totals_table.c.grouping == bindparam("g"),
        totals_table.c.is_null == bindparam("z"),
        totals_table.c.value == bindparam("v"),
    )
    conn.execute(
        update(totals_table).where(key).values(count=totals_table.c.count - bindparam("n")), params
    )
    conn.execute(
        delete(totals_table).where(key, totals_table.c.count <= 0), [{**p, "n": 0} for p in params]
    )


def lock(conn: Connection) -> None:
    """Lock the counts against writers until `conn`'s transaction ends (Postgres; SQLite's
    writers wait anyway): taken before anything else a recount changes, as `forget` takes
    the counts before the dead letters it deletes."""
    if conn.dialect.name == "postgresql":
        conn.execute(
            text(
                "LOCK TABLE tickwork_dead_letter_counts, tickwork_dead_letter_totals "
                "IN EXCLUSIVE MODE"
            )
        )


def rebuild(conn: Connection) -> int:
    """Count every dead letter afresh (one INSERT ... SELECT ... GROUP BY); the rows written.
    On Postgres the counts are locked against writers until `conn`'s transaction ends: a
    dead letter recorded meanwhile waits, and is counted on top of the new counts."""
    lock(conn)
    at = dead_letters.c.at
    if conn.dialect.name == "postgresql":
        day: Any = cast(func.timezone("UTC", at), Date)
    else:  # SQLite keeps naive UTC text: 2026-12-01 03:40:00.123456
        day = func.date(at)
    parts = []
    for by in GROUPS:
        column = dead_letters.c[by]
        is_null = column.is_(None) if column.nullable else false()
        tenant = dead_letters.c.tenant
        parts.append(
            select(
                tenant, literal(by), day, is_null, func.coalesce(column, ""), func.count()
            ).group_by(tenant, day, column)
        )
    conn.execute(delete(counts))
    conn.execute(insert(counts).from_select([*_KEY, "count"], union_all(*parts)))
    conn.execute(delete(totals_table))
    key = (counts.c.tenant, counts.c.grouping, counts.c.is_null, counts.c.value)
    every_day = select(*key, func.sum(counts.c.count)).group_by(*key)
    conn.execute(insert(totals_table).from_select([*_TOTAL_KEY, "count"], every_day))
    return int(conn.execute(select(func.count()).select_from(counts)).scalar_one())


def totals(
    conn: Connection, by: str, since: datetime | None, *, tenant: str | None = None
) -> dict[str | None, int]:
    """Dead letters per value of `by` at or after `since`: the counts of the whole days
    after `since`'s, and the part of its day from `since` counted in the table; all of them
    (since None): the totals, a row per value (and tenant). Only `tenant`'s if given, else
    every tenant's summed."""
    found: Counter[str | None] = Counter()
    if since is None:
        total = (
            select(
                totals_table.c.is_null,
                totals_table.c.value,
                func.sum(totals_table.c.count).label("n"),
            )
            .where(totals_table.c.grouping == by)
            .group_by(totals_table.c.is_null, totals_table.c.value)
        )
        if tenant is not None:
            total = total.where(totals_table.c.tenant == tenant)
        return {None if r.is_null else r.value: int(r.n) for r in conn.execute(total) if r.n > 0}
    query = (
        select(counts.c.is_null, counts.c.value, func.sum(counts.c.count).label("n"))
        .where(counts.c.grouping == by)
        .group_by(counts.c.is_null, counts.c.value)
    )
    if tenant is not None:
        query = query.where(counts.c.tenant == tenant)
    if since.tzinfo is None:
        raise ValueError(f"naive datetime {since!r}: tickwork stores UTC-aware times")
    first = since.astimezone(UTC).date()
    midnight = datetime.combine(first, time(), UTC)
    if since == midnight:
        query = query.where(counts.c.day >= first)
    else:
        query = query.where(counts.c.day > first)
        column, at = dead_letters.c[by], dead_letters.c.at
        part = select(column, func.count()).where(at >= since).group_by(column)
        if first < date.max:  # the last day has no next one to stop at
            part = part.where(at < midnight + timedelta(days=1))
        if tenant is not None:
            part = part.where(dead_letters.c.tenant == tenant)
        for value, n in conn.execute(part):
            found[value] += int(n)
    for row in conn.execute(query):
        found[None if row.is_null else row.value] += int(row.n)
    return {value: n for value, n in found.items() if n > 0}


def latest(
    conn: Connection, by: str, values: Iterable[str | None], *, tenant: str | None = None
) -> dict[str | None, datetime]:
    """The time of the newest dead letter of each of `values` of `by` (`tenant`'s if given):
    one probe of the (`by`, at) index per value, LATEST_BATCH values per statement."""
    mine = dead_letters.c.tenant == tenant if tenant is not None else true()
    column, at = dead_letters.c[by], dead_letters.c.at
    todo = list(values)
    found: dict[str | None, datetime] = {}
    for start in range(0, len(todo), LATEST_BATCH):
        batch = todo[start : start + LATEST_BATCH]
        probes = [
            select(
                literal(i).label("i"),
                select(func.max(at))
                .where(column.is_(None) if value is None else column == value, mine)
                .scalar_subquery()
                .label("latest"),
            )
            for i, value in enumerate(batch)
        ]
        query = union_all(*probes) if len(probes) > 1 else probes[0]
        for row in conn.execute(query):
            found[batch[row.i]] = row.latest
    return found


def _row(tenant: str, day: date, by: str, value: str | None, n: int) -> dict[str, Any]:
    return {
        "tenant": tenant,
        "day": day,
        "grouping": by,
        "is_null": value is None,
        "value": value or "",
        "count": n,
    }
