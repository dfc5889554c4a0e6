"""A dead letter's error signature: its message with the particulars taken out, so that one
cause is one group in `dlq stats --by error_signature` and the export.

Particulars are what differs between two failures of one cause: quoted values, URLs,
absolute paths, times, UUIDs, request ids (hex, or digits after a prefix: req_1234) and
other hex or long mixed ids, tickwork's call ids, and numbers. What tells causes apart
stays: the words, identifiers with digits in them (`gpt-4o-mini`, `claude-3-5-sonnet`,
`utf-8`), error types quoted as constants (`'invalid_request_error'`), JSON keys, and HTTP
status codes (`503 Service Unavailable`, `HTTP 429`, `status: 400`), so a transient error
and a permanent one do not look alike.

The signature is stored with each dead letter and in its counts: `dlq stats --recount`
derives the stored ones again with this function (`rederive`)."""

from __future__ import annotations

import re

from sqlalchemy import Connection, bindparam, select, update
from tickwork.store.schema import dead_letters

#: the longest signature kept (the column's width)
MAX_LENGTH = 300

#: a quote in single or double quotes, within one line; an apostrophe inside a word (the
#: environment's, don't) neither opens nor closes one
_QUOTED = re.compile(r"(?<![A-Za-z0-9])'((?:[^'\n]|'(?=[A-Za-z]))*)'(?![A-Za-z0-9])|\"([^\"\n]*)\"")
#: a quoted error type or code, kept: lower-case words joined by underscores
_CONSTANT = re.compile(r"[a-z]+(?:_[a-z]+)+")
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"<>()]*[^\s'\"<>().,;:]", re.I)
_TIME = re.compile(
    r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|(?<![\w-])\d{4}-\d{2}-\d{2}\b|\b\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\b"
)
_UUID = re.compile(r"\b[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\b", re.I)
#: an absolute or home path, not a/b, N/A or 400/500
_PATH = re.compile(r"(?<![\w.:/~-])~?/[\w.@%+~-]+(?:/[\w.@%+~-]*)*(?<![.])")
#: hex of 6 or more with a digit and a letter (req_3f2ab1c9), or a long run of letters
#: and digits with both (msg_01XFDUDYJgAACzvnpt); underscores count as separators
_HEX_ID = re.compile(
    r"\b0x[0-9a-f]+\b"
    r"|(?<![A-Za-z0-9])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{6,}(?![A-Za-z0-9])",
    re.I,
)
_LONG_ID = re.compile(
    r"(?<![A-Za-z0-9])(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{16,}(?![A-Za-z0-9])"
)
#: a prefixed id of digits (req_1234567, msg_0042): a word, so the number in it stayed
_PREFIXED_ID = re.compile(r"(?<![A-Za-z0-9_-])[A-Za-z]+_\d{3,}(?![A-Za-z0-9_-])")
#: tickwork's call ids: s3c0 is step 3's first call
_CALL_ID = re.compile(r"\bs\d+c\d+\b")
#: a word: letters, digits and underscores, joined by - . , (gpt-4o-2024-08-06, 6,778)
_WORD = re.compile(r"\$?[A-Za-z0-9_]+(?:[-.,][A-Za-z0-9_]+)*")
#: a number with a unit glued to it: 30s, 12.5ms, 5MB
_MEASURE = re.compile(r"\$?\d[\d,.]*(ms|[smhdk]|[kmg]i?b|b)?", re.I)
_NUMBER = re.compile(r"\$?\d+(?:,\d{3})*(?:\.\d+)?")
_STATUS_BEFORE = re.compile(
    r"(?:\bhttp(?:/[\d.]+)?|\bstatus(?:[ _]code)?|\bcode|error)['\"]?\s*[:=]?\s*$", re.I
)
_STATUS_AFTER = re.compile(
    r"^\s*(?:[-:]\s*)?(?:Bad|Unauthorized|Payment|Forbidden|Not|Method|Request|Conflict|Gone|"
    r"Precondition|Payload|Unsupported|Unprocessable|Too|Internal|Service|Gateway|"
    r"Upstream|upstream|error|Error|status|overloaded|Overloaded)\b"
)
#: the exception class a graph node's failure once began with ("NodeFailed: node 'charge'
#: raised ..."), dropped so that it groups with the same failure worded as now
_RETIRED_PREFIX = re.compile(
    r"\b(?:NodeFailed|InvalidStateUpdate): (?=node |input \d|the branches of node )"
)
#: the node a graph node's other failure names ("node 'split' failed: TypeError: ..."),
#: which it once did not ("TypeError: ..."), dropped so that the two group; not a branch's
#: failure, which names its code ("branch ... of node 'split' failed: INTERNAL: ...")
_NODE_FAILED = re.compile(
    r"(?<!of )\bnode (?:'[^']*'|\"[^\"]*\") failed: (?=[A-Z]\w*: )(?![A-Z_]+: )"
)
#: a count's noun in the singular, as messages say "1 step" beside "2 steps"
_COUNTED = re.compile(
    r"\bN (step|token|call|attempt|intervention|second|byte|char|character|line|"
    r"session|tick|file|minute|hour|repeat)\b"
)


def error_signature(code: str, message: str) -> str:
    """`code: message` with the message's particulars taken out, at most MAX_LENGTH long."""
    text = _NODE_FAILED.sub("", _RETIRED_PREFIX.sub("", message))
    text = _QUOTED.sub(_quoted, text)
    text = _URL.sub("<url>", text)
    text = _TIME.sub("<time>", text)
    text = _UUID.sub("<id>", text)
    text = _PATH.sub("<path>", text)
    text = _HEX_ID.sub("<id>", text)
    text = _LONG_ID.sub("<id>", text)
    text = _PREFIXED_ID.sub("<id>", text)
    text = _CALL_ID.sub("sNcN", text)
    text = _WORD.sub(_word, text)
    # one cause, one signature: "1 step made" and "2 steps made" are both "N steps made"
    text = _COUNTED.sub(r"N \1s", text)
    return f"{code}: {text}"[:MAX_LENGTH]


def _quoted(match: re.Match[str]) -> str:
    value = match.group(1) if match.group(1) is not None else match.group(2)
    after = match.string[match.end() : match.end() + 2].lstrip()
    if after.startswith(":") or _CONSTANT.fullmatch(value):  # a JSON key, an error type
        return match.group(0)
    return "'…'"


def _word(match: re.Match[str]) -> str:
    """A word with a letter is an identifier (gpt-4o, utf-8, sNcN) and stays, but for a
    number with its unit (30s); a word of numbers (6,778, 10.0.0.3) is Ns, but for an HTTP
    status code, which stays."""
    word = match.group(0)
    if len(word) == 3 and word.isdigit() and "100" <= word <= "599":
        before = match.string[max(0, match.start() - 20) : match.start()]
        after = match.string[match.end() : match.end() + 20]
        if _STATUS_BEFORE.search(before) or _STATUS_AFTER.match(after):
            return word
    measure = _MEASURE.fullmatch(word)
    if measure:
        return "N" + (measure.group(1) or "")
    if any(ch.isalpha() for ch in word):
        return word
    return _NUMBER.sub("N", word)


def rederive(conn: Connection, *, batch: int = 1000) -> int:
    """Derive every stored dead letter's signature again from its code and message (those
    stored by an older tickwork group with today's); how many changed. The counts keep the
    old values until they are counted afresh (`dead_letter_counts.rebuild`, in the same
    transaction)."""
    changed, after = 0, 0
    column = dead_letters.c
    while True:
        rows = conn.execute(
            select(column.id, column.code, column.message, column.error_signature)
            .where(column.id > after)
            .order_by(column.id)
            .limit(batch)
        ).all()
        if not rows:
            return changed
        after = rows[-1].id
        new = [
            {"key": r.id, "signature": signature}
            for r in rows
            if (signature := error_signature(r.code, r.message)) != r.error_signature
        ]
        if new:
            conn.execute(
                update(dead_letters)
                .where(column.id == bindparam("key"))
                .values(error_signature=bindparam("signature")),
                new,
            )
            changed += len(new)
