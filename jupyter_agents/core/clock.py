"""Time as the package keeps it: the one place that converts between the store's ISO 8601
strings (UTC, ``Z``-suffixed: ``2026-12-03T17:05:00.123456Z``), aware ``datetime``
objects and epoch seconds. Every other module calls these instead of converting by hand.
"""

from __future__ import annotations

from datetime import datetime, timezone


def now() -> datetime:
    """The current time, aware, in UTC."""
    return datetime.now(timezone.utc)


def iso(when: float | datetime) -> str:
    """``when`` (epoch seconds, or a datetime: naive ones are taken as UTC) as the store
    writes times.

    >>> iso(0.0), iso(datetime(2026, 12, 3, 17, 5))
    ('1970-01-01T00:00:00Z', '2026-12-03T17:05:00Z')
    """
    if not isinstance(when, datetime):
        when = datetime.fromtimestamp(when, timezone.utc)
    elif when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def now_iso() -> str:
    """The current time as the store writes times."""
    return iso(now())


def parse(text: str) -> datetime:
    """An ISO 8601 time as an aware datetime (naive ones are UTC); ``ValueError`` if it
    is not one.

    >>> parse("2026-12-03T17:05:00Z").hour, parse("2026-12-03T17:05:00").tzinfo
    (17, datetime.timezone.utc)
    """
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def parse_or_none(value: object) -> datetime | None:
    """:func:`parse` of what a file says, or None when it is not an ISO 8601 string."""
    if not isinstance(value, str):
        return None
    try:
        return parse(value)
    except ValueError:
        return None


def epoch(text: str) -> float:
    """An ISO 8601 time as epoch seconds.

    >>> epoch("1970-01-01T00:01:00Z")
    60.0
    """
    return parse(text).timestamp()


def seconds(when: datetime) -> float:
    """An aware datetime as epoch seconds."""
    return when.timestamp()


def day(seconds: float) -> str:
    """The UTC date of epoch ``seconds``, as ``YYYY-MM-DD``."""
    return from_epoch(seconds).date().isoformat()


def from_epoch(seconds: float) -> datetime:
    """Epoch seconds as an aware datetime in UTC."""
    return datetime.fromtimestamp(seconds, timezone.utc)
