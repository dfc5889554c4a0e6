"""Where a command's traffic may go (docs/DESIGN.md section 13): the operator's allow-list of hosts,
a submitter's narrower one, and the addresses nobody reaches unless listed exactly.

Pure values and functions: parse a pattern, match a host and port, narrow a list, judge an
address. The egress proxy (`worker/sandbox/egress.py`) and the repair job's input check use
them; `worker/files/sources.py` judges a repository's address with `public`.

Patterns: `host`, `host:port`, `*.example.org` (its subdomains, not itself), `*` (any
host), an IPv4 address or a bracketed IPv6 one, each with or without `:port`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

#: IPv6 prefixes that carry an IPv4 address in their last 32 bits (NAT64, IPv4-compatible)
_EMBEDDING = tuple(ipaddress.ip_network(n) for n in ("64:ff9b::/96", "64:ff9b:1::/48", "::/96"))
#: cloud instance metadata services (AWS, GCP, Azure, ...; AWS's IPv6 one)
METADATA = frozenset(ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254"))
#: the ranges kept for documentation (RFC 5737, RFC 3849), which Python counts as private: a
#: name resolving there is one an intercepting resolver or proxy answered, not a LAN's
DOCUMENTATION = tuple(
    ipaddress.ip_network(n)
    for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")
)
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")


def carried(address: Address) -> list[Address]:
    """`address` and any IPv4 address it carries (mapped, 6to4, Teredo, NAT64)."""
    found: list[Address] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        found += [v4 for v4 in (address.ipv4_mapped, address.sixtofour) if v4 is not None]
        found += [address.teredo[1]] if address.teredo else []
        if any(address in net for net in _EMBEDDING) and int(address) > 1:  # not :: or ::1
            found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def public(address: Address) -> bool:
    """Whether `address`, and any IPv4 address it carries, is on the public internet."""
    return all(a.is_global and not a.is_multicast for a in carried(address))


def kind(address: Address) -> str:
    """What a non-public address is, in a word or two, for a refusal."""
    for a in carried(address):
        if a in METADATA:
            return "cloud metadata"
    names = ("unspecified", "loopback", "link_local", "multicast", "reserved", "private")
    for a in reversed(carried(address)):  # the IPv4 address carried says most
        if any(a.version == n.version and a in n for n in DOCUMENTATION):
            return "documentation-only (TEST-NET)"
        for name in names:
            if getattr(a, f"is_{name}"):
                return name.replace("_", "-")
    return "non-public"


def _host(text: str, *, pattern: bool) -> str:
    """A host name or address as compared: lower case, no trailing dot, IPs normalised."""
    host = text.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if pattern and host == "*":
        return host
    labels = (host[2:] if pattern and host.startswith("*.") else host).split(".")
    if not host or not all(_LABEL.match(label) for label in labels):
        raise ValueError(f"{text!r} is not a host name or IP address")
    return host


def _not_a_url(text: str) -> None:
    """Refuse a URL (`https://files.pythonhosted.org`, `pypi.org/simple`) naming the host it
    holds: an operator pastes one where a host belongs, and was told it had no valid port."""
    text = text.strip()
    if "/" not in text:
        return
    try:
        ipaddress.ip_network(text.strip("[]"), strict=False)
    except ValueError:
        pass
    else:
        raise ValueError(f"{text!r} is a network: give hosts, or exact addresses, one by one")
    where = urlsplit(text if "://" in text else f"//{text}").netloc.rpartition("@")[2]
    named = f": give its host, {where}" if where else ""
    raise ValueError(f"{text!r} is a URL, not a host or host:port{named}")


def split_host_port(text: str, default: int | None = None) -> tuple[str, int | None]:
    """`host`, `host:port`, `[v6]` or `[v6]:port` as (host, port)."""
    text = text.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"{text!r}: an IPv6 address goes in brackets, e.g. [2001:db8::1]:443")
        port_text = rest[1:] if rest else ""
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        raise ValueError(f"{text!r}: an IPv6 address goes in brackets, e.g. [2001:db8::1]:443")
    else:
        host, port_text = text, ""
    if not port_text:
        return host, default
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{text!r} has no valid port (1-65535)")
    return host, int(port_text)


@dataclass(frozen=True, order=True)
class Pattern:
    """One entry of an allow-list."""

    host: str
    #: None: any port
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> Pattern:
        _not_a_url(text)
        host, port = split_host_port(text)
        return cls(_host(host, pattern=True), port)

    @property
    def address(self) -> Address | None:
        """The IP address this pattern names, if it names one."""
        try:
            return ipaddress.ip_address(self.host)
        except ValueError:
            return None

    def matches(self, host: str, port: int) -> bool:
        """Whether a request for `host:port` (`host` as `_host` gives it) is on this entry."""
        if self.port is not None and port != self.port:
            return False
        if self.host == "*":
            return True
        if self.host.startswith("*."):
            return host.endswith(self.host[1:])
        return host == self.host

    def covers(self, other: Pattern) -> bool:
        """Whether everything `other` allows, this allows too."""
        if self.port is not None and other.port != self.port:
            return False
        if self.host == "*":
            return True
        if other.host == "*":
            return False
        if self.host.startswith("*."):
            return other.host.endswith(self.host[1:])
        return other.host == self.host

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"


def parse(entries: str | Iterable[str]) -> tuple[Pattern, ...]:
    """Patterns from comma-separated text or a list; a `ValueError` names a bad one."""
    items = entries.split(",") if isinstance(entries, str) else list(entries)
    found: list[Pattern] = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"{item!r} is not text; give host or host:port patterns")
        if item.strip():
            pattern = Pattern.parse(item)
            if pattern not in found:
                found.append(pattern)
    return tuple(found)


@dataclass(frozen=True)
class AllowList:
    """The hosts a command may reach, and the exact ip:port entries the operator listed,
    which alone may be loopback, private or link-local addresses."""

    patterns: tuple[Pattern, ...] = ()
    exact: frozenset[Pattern] = frozenset()

    @classmethod
    def of(cls, entries: str | Iterable[str]) -> AllowList:
        """The operator's list (`TICKWORK_EGRESS_ALLOW`)."""
        patterns = parse(entries)
        exact = frozenset(p for p in patterns if p.address is not None and p.port is not None)
        return cls(patterns, exact)

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def wider(self, entries: Iterable[str]) -> list[str]:
        """The entries of a submitter's list this list does not cover."""
        return [str(p) for p in parse(entries) if not any(q.covers(p) for q in self.patterns)]

    def narrowed(self, entries: Iterable[str]) -> AllowList:
        """This list cut down to `entries` (a submitter's); entries it does not cover are
        dropped (`wider` names them, for a refusal at submit)."""
        kept = tuple(p for p in parse(entries) if any(q.covers(p) for q in self.patterns))
        return AllowList(kept, frozenset(p for p in kept if p in self.exact))

    def permits(self, host: str, port: int) -> bool:
        """Whether `host:port` is on the list (its addresses are judged by `refusal`)."""
        try:
            name = _host(host, pattern=False)
        except ValueError:
            return False
        return any(p.matches(name, port) for p in self.patterns)

    def __str__(self) -> str:
        return ",".join(str(p) for p in self.patterns) or "(empty)"


def refusal(address: Address, port: int, allow: AllowList) -> str | None:
    """Why a connection to `address:port` is refused, or None if it may be made: an address
    that is not public only when the operator listed exactly that ip:port."""
    if port <= 0 or port > 65535:
        return f"port {port} is not a valid port"
    for form in carried(address):
        if Pattern(str(form), port) in allow.exact:
            return None
    if public(address):
        return None
    shown = f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"
    return (
        f"{shown} is a {kind(address)} address; only an exact ip:port the operator lists "
        "in TICKWORK_EGRESS_ALLOW may be one"
    )
