"""Request parsing: every query argument, header and body the REST routes read is
parsed here, so bad input is an :class:`~jupyter_agents.core.errors.InvalidRequest` (400)
whose message names the argument, never a 500.

Numbers are ASCII digits only and bounded (``str.isdigit`` accepts ``"²"``, which
``int`` refuses, and ``int`` takes ``"٣"`` and refuses more than 4300 digits); bodies
are UTF-8 JSON objects, strictly (no ``NaN``, at most :data:`MAX_BODY` bytes, nesting
within the parser's recursion limit); header values we send that carry user text are encoded
per RFC 6266/5987 (:func:`content_disposition`). Below this wing, values are typed:
a search is a :class:`~jupyter_agents.sessions.query.Query` (:func:`search_query`), a
transcript window a :class:`~jupyter_agents.terminal.transcripts.Want` (:func:`wanted`).
Pure: no tornado, no IO.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from jupyter_agents.core.errors import InvalidRequest
from jupyter_agents.sessions.query import DEFAULT_LIMIT, MAX_LIMIT, Query, parse_cursor, parse_since
from jupyter_agents.terminal.transcripts import Want

#: the largest number any argument takes (a byte offset, a count)
MAX_INT = 2**63 - 1
#: the largest request body parsed (ours are a few fields; tornado has read it already)
MAX_BODY = 64 * 1024
_RANGE = re.compile(r"bytes=([0-9]*)-([0-9]*)", re.ASCII)


def shown(value: object, width: int = 40) -> str:
    """``value`` as a message quotes it: its repr, cut to ``width`` characters.

    >>> shown("9" * 100, 8)
    "'9999..."
    """
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def integer(name: str, value: str, low: int = 0, high: int = MAX_INT) -> int:
    """The whole number ``value`` (ASCII digits only) from ``low`` to ``high``.

    >>> integer("limit", "50", 1, 500)
    50
    >>> integer("limit", "²")
    Traceback (most recent call last):
    ...
    jupyter_agents.core.errors.InvalidRequest: limit must be a whole number from 0 to 9223372036854775807, got '²'
    >>> integer("limit", "0", 1, 500)
    Traceback (most recent call last):
    ...
    jupyter_agents.core.errors.InvalidRequest: limit must be a whole number from 1 to 500, got '0'
    """  # noqa: E501
    ok = value.isascii() and value.isdigit() and len(value) <= len(str(high)) + 2
    if not ok or not low <= int(value) <= high:
        raise InvalidRequest(
            f"{name} must be a whole number from {low} to {high}, got {shown(value)}"
        )
    return int(value)


def optional_integer(
    name: str, value: str | None, default: int | None = None, low: int = 0, high: int = MAX_INT
) -> int | None:
    """:func:`integer`, or ``default`` for an argument that is absent or empty.

    >>> optional_integer("offset", None), optional_integer("limit", "", 50, 1, 500)
    (None, 50)
    """
    return default if value is None or value == "" else integer(name, value, low, high)


def flag(name: str, value: str | None) -> bool:
    """A boolean argument: ``true``/``1`` or ``false``/``0`` (absent or empty: false).

    >>> flag("regex", "true"), flag("regex", None), flag("case", "0")
    (True, False, False)
    >>> flag("regex", "yes")
    Traceback (most recent call last):
    ...
    jupyter_agents.core.errors.InvalidRequest: regex must be true or false, got 'yes'
    """
    if value in (None, "", "false", "0"):
        return False
    if value in ("true", "1"):
        return True
    raise InvalidRequest(f"{name} must be true or false, got {shown(value, 20)}")


def choice(name: str, value: str, choices: Collection[str]) -> str:
    """``value`` if it is one of ``choices``.

    >>> choice("format", "html", ["txt", "html"])
    'html'
    >>> choice("format", "pdf", ["txt", "html"])
    Traceback (most recent call last):
    ...
    jupyter_agents.core.errors.InvalidRequest: unknown format 'pdf'; one of txt, html
    """
    if value not in choices:
        raise InvalidRequest(f"unknown {name} {shown(value, 20)}; one of {', '.join(choices)}")
    return value


def byte_range(header: str) -> tuple[int | None, int | None]:
    """An HTTP ``Range`` header of one byte range: ``bytes=a-b`` as ``(a, b)``,
    ``bytes=a-`` as ``(a, None)``, the suffix ``bytes=-n`` as ``(None, n)``.

    >>> byte_range("bytes=0-99"), byte_range("bytes=100-"), byte_range(" bytes=-500 ")
    ((0, 99), (100, None), (None, 500))
    >>> byte_range("bytes=²-")
    Traceback (most recent call last):
    ...
    jupyter_agents.core.errors.InvalidRequest: unsupported Range 'bytes=²-'; use bytes=a-b, bytes=a- or bytes=-n
    """  # noqa: E501
    m = _RANGE.fullmatch(header.strip())
    if m is None or m.groups() == ("", ""):
        raise InvalidRequest(
            f"unsupported Range {shown(header, 80)}; use bytes=a-b, bytes=a- or bytes=-n"
        )
    low, high = (None if g == "" else integer("Range", g) for g in m.groups())
    return low, high


def wanted(offset: str | None, length: str | None, range_header: str | None) -> Want:
    """The bytes a log request asks for: ``?offset=&length=`` (no offset: from the first
    byte kept), or, with neither, an HTTP ``Range`` header (:func:`byte_range`).

    >>> wanted("90", "50", None)
    Want(start=90, length=50, last=None, partial=False)
    >>> wanted(None, None, "bytes=2-4"), wanted(None, None, "bytes=-10")
    (Want(start=2, length=3, last=None, partial=True), Want(start=None, length=None, last=10, partial=True))
    """  # noqa: E501
    if range_header is not None and offset is None and length is None:
        low, high = byte_range(range_header)
        if low is None:
            return Want(last=high or 0, partial=True)
        return Want(start=low, length=None if high is None else high + 1 - low, partial=True)
    return Want(
        start=None if offset is None else integer("offset", offset),
        length=None if length is None else integer("length", length),
    )


def search_query(
    args: Mapping[str, str | None], kinds: Collection[str], now: datetime | None = None
) -> Query:
    """A search (:meth:`~jupyter_agents.sessions.query.Query.checked`) from the arguments
    ``q``, ``regex``, ``case``, ``session``, ``kind``, ``status``, ``since`` (a time or
    a duration, :func:`~jupyter_agents.sessions.query.parse_since`), ``limit`` and
    ``cursor``; :class:`InvalidRequest` naming the one that is malformed.

    >>> search_query({"q": "a(", "kind": "shell", "since": "2h"}, ["shell"]).pattern
    'a('
    >>> search_query({"q": "x", "limit": "²"}, ["shell"])
    Traceback (most recent call last):
    ...
    jupyter_agents.core.errors.InvalidRequest: limit must be a whole number from 1 to 500, got '²'
    """
    since, cursor = args.get("since"), args.get("cursor")
    return Query.checked(
        args.get("q") or "",
        kinds,
        regex=flag("regex", args.get("regex")),
        case=flag("case", args.get("case")),
        session=args.get("session"),
        kind=args.get("kind"),
        status=args.get("status"),
        since=parse_since(since, now) if since else None,
        limit=optional_integer("limit", args.get("limit"), DEFAULT_LIMIT, 1, MAX_LIMIT)
        or DEFAULT_LIMIT,
        cursor=parse_cursor(cursor) if cursor else None,
    )


def json_object(body: bytes, allowed: Collection[str] | None = None) -> dict[str, Any]:
    """A request body: a JSON object in UTF-8 (an empty body is ``{}``), with no field
    outside ``allowed`` (any field if None).

    >>> json_object(b'{"kind": "shell"}', {"kind", "cwd"}), json_object(b"")
    ({'kind': 'shell'}, {})
    >>> json_object(b'{"name": "\\xff"}')
    Traceback (most recent call last):
    ...
    jupyter_agents.core.errors.InvalidRequest: the body is not UTF-8 (byte 0xff at 10)
    >>> json_object(b'{"kinds": NaN}')
    Traceback (most recent call last):
    ...
    jupyter_agents.core.errors.InvalidRequest: the body is not JSON: NaN is not a JSON value
    >>> json_object(b'{"name": "\\\\ud800"}')
    Traceback (most recent call last):
    ...
    jupyter_agents.core.errors.InvalidRequest: the body holds a lone surrogate (U+D800)
    >>> json_object(b'{"kind": "shell", "x": 1}', {"kind"})
    Traceback (most recent call last):
    ...
    jupyter_agents.core.errors.InvalidRequest: unknown fields ['x']; known: kind
    """
    if len(body) > MAX_BODY:
        raise InvalidRequest(f"the body is {len(body)} bytes; at most {MAX_BODY} are read")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidRequest(
            f"the body is not UTF-8 (byte 0x{body[e.start]:02x} at {e.start})"
        ) from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except ValueError as e:  # JSONDecodeError; an integer of over 4300 digits
        raise InvalidRequest(f"the body is not JSON: {str(e)[:120]}") from None
    except RecursionError:
        raise InvalidRequest("the body nests arrays or objects too deep") from None
    if not isinstance(data, dict):
        raise InvalidRequest(f"the body must be a JSON object, not {type(data).__name__}")
    try:  # a JSON \uXXXX escape can name half a UTF-16 pair, which is no text
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidRequest(
            f"the body holds a lone surrogate (U+{ord(e.object[e.start]):04X})"
        ) from None
    unknown = set(data) - set(allowed) if allowed is not None else set()
    if unknown:
        known = ", ".join(sorted(allowed or ()))
        raise InvalidRequest(f"unknown fields {sorted(unknown)}; known: {known}")
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def fields(data: Mapping[str, Any], types: Mapping[str, type | tuple[type, ...]]) -> None:
    """Check that each field of ``data`` named in ``types`` has that type (absent or
    null is fine: a default applies).

    >>> fields({"cwd": "/tmp", "name": None}, {"cwd": str, "name": str})
    >>> fields({"cwd": 1}, {"cwd": str})
    Traceback (most recent call last):
    ...
    jupyter_agents.core.errors.InvalidRequest: cwd must be a string, got 1
    """
    names = {str: "a string", list: "a list", int: "a whole number", bool: "true or false"}
    for name, kind in types.items():
        value = data.get(name)
        if value is not None and not isinstance(value, kind):
            kinds = kind if isinstance(kind, tuple) else (kind,)
            what = " or ".join(names.get(k, k.__name__) for k in kinds)
            raise InvalidRequest(f"{name} must be {what}, got {shown(value)}")


def content_disposition(filename: str, disposition: str = "attachment") -> str:
    """A ``Content-Disposition`` value (RFC 6266) for a download named ``filename``:
    ``filename="..."`` in ASCII, and for any other name also ``filename*`` with the
    name in UTF-8 (RFC 5987), which browsers prefer; the ASCII one has ``_`` for each
    character it cannot hold (non-ASCII, control, quote, backslash).

    >>> content_disposition("shell-1-a1.txt")
    'attachment; filename="shell-1-a1.txt"'
    >>> print(content_disposition('тест "1".txt'))
    attachment; filename="____ _1_.txt"; filename*=UTF-8''%D1%82%D0%B5%D1%81%D1%82%20%221%22.txt
    """
    fallback = "".join(c if " " <= c <= "~" and c not in '"\\' else "_" for c in filename)
    value = f'{disposition}; filename="{fallback}"'
    if fallback != filename:
        value += "; filename*=UTF-8''" + urllib.parse.quote(filename, safe="")
    return value
