"""Who acts on a session: the name of the person recorded as its submitter, a decision's
approver, a fork's author, a cancel's requester and a dead letter's closer.

A name is what the command line's `--as`, the Python client's `submitted_by`, `approver`
and `by`, and an API token's `name` give. It is printed in `show`, the page and log lines,
so it holds no character a terminal would obey: a newline would split its line, an escape
could rewrite the lines a person approves. Names stored before this rule are read as they
are.
"""

from __future__ import annotations

import re

from tickwork.fsm.errors import InvalidInput

#: the longest name (the width of its columns)
MAX_NAME = 200
#: what a name may not hold: C0 and C1 controls (a newline, a tab, an escape), DEL, the
#: line and paragraph separators and the bidirectional overrides (those `show` drops,
#: `tickwork.views.CONTROL_RANGES`, and the newline and tab it keeps)
_REFUSED = r"\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
#: a name as the API's schema states it (Python, ECMA-262 and Rust's regex read it alike)
NAME_PATTERN = rf"^[^{_REFUSED}]{{1,{MAX_NAME}}}$"
#: what a name is, as a refusal says it
NAME_RULE = (
    f"a name is 1 to {MAX_NAME} characters of letters, digits, spaces and punctuation, "
    "without control characters (newline, tab, escape)"
)
_CONTROL = re.compile(f"[{_REFUSED}]")


def check_name(name: object, *, what: str) -> str:
    """`name` without the spaces around it if it is a person's name; else InvalidInput
    naming `what` (the option or field that gave it) and what a name may hold."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput(f"{what} is empty: give who acts; {NAME_RULE}")
    name = name.strip()
    if (found := _CONTROL.search(name)) is not None:
        raise InvalidInput(
            f"{what} {name[:40]!r} holds the control character U+{ord(found.group()):04X}; "
            f"{NAME_RULE}"
        )
    if len(name) > MAX_NAME:
        raise InvalidInput(
            f"{what} is {len(name):,} characters long; a name is at most {MAX_NAME} characters"
        )
    return name
