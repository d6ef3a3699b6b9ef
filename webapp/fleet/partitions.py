"""The readings table's days: on PostgreSQL, one declarative partition per UTC day of
`t_ms` (RANGE partitioning), created before readings arrive and dropped whole when their
retention is over (webapp/leasing/retention.py); on SQLite (the demo) one plain table whose
days are deleted row by row, with the same semantics.

The DDL lives here and in the migration that made the table (fleet 0005), nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from django.db import DatabaseError, connection, transaction

from ledger.units import MS_PER_DAY, datetime_of_ms, ms_of

TABLE = "fleet_telemetrysample"
PARTITION_PREFIX = f"{TABLE}_p"  # then YYYYMMDD of the day it holds


def partitioned() -> bool:
    """Whether the readings are partitioned here (PostgreSQL) or one table (SQLite)."""
    return connection.vendor == "postgresql"


def day_start_ms(t_ms: int) -> int:
    return t_ms - t_ms % MS_PER_DAY


def partition_name(day_ms: int) -> str:
    return PARTITION_PREFIX + datetime_of_ms(day_ms).strftime("%Y%m%d")


def day_of(name: str) -> int:
    stamp = datetime.strptime(name.removeprefix(PARTITION_PREFIX), "%Y%m%d").replace(tzinfo=UTC)
    return ms_of(stamp)


def create_sql(day_ms: int) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {partition_name(day_ms)} PARTITION OF {TABLE} "
        f"FOR VALUES FROM ({day_ms}) TO ({day_ms + MS_PER_DAY})"
    )


def ensure_days(times_ms: Iterable[int]) -> list[int]:
    """Create the partitions of the days these instants fall in that do not exist yet (a
    reading for a day without one would be refused by PostgreSQL); returns the days made.
    Each check is a catalogue look-up: cheap enough to do before every insert."""
    if not partitioned():
        return []
    made = []
    with connection.cursor() as cursor:
        for day in sorted({day_start_ms(t) for t in times_ms}):
            cursor.execute("SELECT to_regclass(%s)", [partition_name(day)])
            if cursor.fetchone()[0] is not None:
                continue
            try:
                with transaction.atomic():  # another process may create it at the same time
                    cursor.execute(create_sql(day))
                made.append(day)
            except DatabaseError:
                cursor.execute("SELECT to_regclass(%s)", [partition_name(day)])
                if cursor.fetchone()[0] is None:
                    raise
    return made


def stored_days() -> list[int]:
    """The days that hold readings (PostgreSQL: that have a partition), oldest first."""
    with connection.cursor() as cursor:
        if partitioned():
            cursor.execute(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = %s::regclass",
                [TABLE],
            )
            return sorted(day_of(name) for (name,) in cursor.fetchall())
        cursor.execute(f"SELECT DISTINCT t_ms - (t_ms %% %s) FROM {TABLE}", [MS_PER_DAY])
        return sorted(day for (day,) in cursor.fetchall())


def drop_day(day_ms: int) -> None:
    """Remove one day of readings: DROP its partition (no row-by-row delete, no bloat), or
    on SQLite delete its rows."""
    with connection.cursor() as cursor:
        if partitioned():
            # rows written earlier in this transaction have deferred foreign-key checks
            # pending, which DROP refuses to leave behind: run them now
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(f"DROP TABLE IF EXISTS {partition_name(day_ms)}")
        else:
            cursor.execute(
                f"DELETE FROM {TABLE} WHERE t_ms >= %s AND t_ms < %s",
                [day_ms, day_ms + MS_PER_DAY],
            )


def table_bytes() -> int:
    """What the readings take on disk, indexes included (PostgreSQL; 0 elsewhere)."""
    if not partitioned():
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0) FROM pg_inherits i "
            "WHERE i.inhparent = %s::regclass",
            [TABLE],
        )
        return int(cursor.fetchone()[0])
