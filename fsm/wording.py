"""How a count or a number reads in a message or a log line: "1 session", "2 sessions",
"1000000" (not "1e+06")."""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and `noun`, singular for one and else `plural` (`noun` + "s" unless given):
    `counted(1, "session")` is "1 session", `counted(2, "batch", "batches")` "2 batches"."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def plain(value: float) -> str:
    """`value` as a person writes it in an option, and as the option reads it back: 1000000,
    2.5, 0.000001; never 1e+06 (`:g`), never a thousands separator."""
    if float(value).is_integer():
        return str(int(value))
    return format(Decimal(repr(float(value))), "f")


def dollars(value: float, *, up: bool = False) -> str:
    """A dollar amount as a person writes it, without its `$` (a message puts one before it,
    an option's value takes none): whole dollars bare (10), else cents and up to 4 decimals
    (10.50, 0.0132, 1.2346), and below a cent its first 2 significant digits (0.000012), so
    no amount spent reads as 0.0000; `up` rounds up, for an amount a budget must pass."""
    exact = Decimal(repr(float(value)))
    if not exact:
        return "0"
    if exact >= Decimal("0.01"):
        shown = _to_step(exact, Decimal("0.0001"), up=up)
    else:
        shown = two_digits(value, up=up)
    if shown == shown.to_integral_value():
        return str(int(shown))
    text = format(shown.normalize(), "f")
    return text if len(text.partition(".")[2]) >= 2 else f"{text}0"


#: the least cost `usd` shows with its digits; a cost above nothing and below it reads "<$0.0001"
LEAST_USD = 0.0001


def usd(value: float) -> str:
    """A cost as `tickwork ls`, `show` and the page list it (core.js `usd` reads alike): `$`
    and 4 decimals ($0.0132, $1.2000), and a cost above nothing but below a hundredth of a
    cent `<$0.0001`: a cost spent never reads as $0.0000, as none spent does."""
    if 0 < value < LEAST_USD:
        return f"<${LEAST_USD:.4f}"
    return f"${value:.4f}"


def two_digits(value: float, *, up: bool = False) -> Decimal:
    """`value` to its first 2 significant digits (12.34: 12, 0.00001234: 0.000012), rounded
    half up, or up (`up`: 12.01 is 13), as a person gives an amount a budget must pass;
    what `dollars` shows of one below a cent."""
    exact = Decimal(repr(float(value)))
    if not exact:
        return exact
    return _to_step(exact, Decimal(1).scaleb(exact.adjusted() - 1), up=up)


def _to_step(exact: Decimal, step: Decimal, *, up: bool) -> Decimal:
    """`exact` to a whole number of `step`s, rounded half up, or up (`up`)."""
    return (exact / step).to_integral_value(ROUND_CEILING if up else ROUND_HALF_UP) * step
