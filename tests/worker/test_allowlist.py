"""The egress allow-list and address policy (worker/config/allowlist.py), table-driven."""

from __future__ import annotations

import ipaddress

import pytest
from tickwork.worker.config.allowlist import AllowList, Pattern, parse, refusal

OPERATOR = AllowList.of("pypi.org,*.pythonhosted.org,index.example:8443,127.0.0.1:3141,*")


@pytest.mark.parametrize(
    ("address", "port", "refused"),
    [
        ("151.101.0.223", 443, None),
        ("2a04:4e42::223", 443, None),
        ("127.0.0.1", 5432, "loopback"),
        ("127.0.0.1", 6379, "loopback"),
        ("127.0.0.1", 5672, "loopback"),
        ("127.8.9.10", 80, "loopback"),
        ("::1", 443, "loopback"),
        ("10.0.0.1", 80, "private"),
        ("172.16.5.4", 80, "private"),
        ("192.168.1.1", 80, "private"),
        ("100.64.0.1", 80, "non-public"),  # carrier-grade NAT
        ("fd12:3456::1", 80, "private"),
        ("203.0.113.80", 443, "documentation-only"),  # how an intercepting resolver answers
        ("2001:db8::1", 443, "documentation-only"),
        ("169.254.169.254", 80, "cloud metadata"),
        ("fd00:ec2::254", 80, "cloud metadata"),
        ("169.254.1.2", 80, "link-local"),
        ("fe80::1", 80, "link-local"),
        ("224.0.0.1", 80, "multicast"),
        ("ff02::1", 80, "multicast"),
        ("0.0.0.0", 80, "unspecified"),
        ("::", 80, "unspecified"),
        ("240.0.0.1", 80, "reserved"),
        ("::ffff:127.0.0.1", 5432, "loopback"),  # IPv4-mapped
        ("::ffff:169.254.169.254", 80, "cloud metadata"),
        ("::ffff:10.0.0.1", 80, "private"),
        ("64:ff9b::7f00:1", 80, "loopback"),  # NAT64 of 127.0.0.1
        ("2002:7f00:1::1", 80, "loopback"),  # 6to4 of 127.0.0.1
        ("::ffff:151.101.0.223", 443, None),
        ("127.0.0.1", 3141, None),  # listed exactly by the operator
        ("::ffff:127.0.0.1", 3141, None),  # the same address, mapped
        ("127.0.0.1", 3142, "loopback"),  # the same address, another port
        ("151.101.0.223", 0, "not a valid port"),
    ],
)
def test_an_address_is_refused_unless_public_or_listed_exactly(
    address: str, port: int, refused: str | None
) -> None:
    why = refusal(ipaddress.ip_address(address), port, OPERATOR)
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why, why


@pytest.mark.parametrize(
    ("host", "port", "permitted"),
    [
        ("pypi.org", 443, True),
        ("PyPI.org.", 80, True),  # case and a trailing dot
        ("evil-pypi.org", 443, False),
        ("pypi.org.evil.test", 443, False),
        ("files.pythonhosted.org", 443, True),
        ("a.b.pythonhosted.org", 443, True),
        ("pythonhosted.org", 443, False),  # *. is its subdomains only
        ("index.example", 8443, True),
        ("index.example", 443, False),
        ("127.0.0.1", 3141, True),
        ("127.0.0.1", 5432, False),
        ("localhost", 3141, False),
        ("", 443, False),
        ("bad host", 443, False),
    ],
)
def test_a_host_is_on_the_list_or_not(host: str, port: int, permitted: bool) -> None:
    listed = AllowList.of("pypi.org,*.pythonhosted.org,index.example:8443,127.0.0.1:3141")
    assert listed.permits(host, port) is permitted


@pytest.mark.parametrize(
    ("wanted", "wider"),
    [
        (["pypi.org"], []),
        (["pypi.org:443"], []),
        (["files.pythonhosted.org", "*.a.pythonhosted.org"], []),
        (["*.pythonhosted.org:443"], []),
        (["index.example:8443"], []),
        (["index.example"], ["index.example"]),  # every port, where the operator gave one
        (["pythonhosted.org"], ["pythonhosted.org"]),
        (["evil.test"], ["evil.test"]),
        (["*"], ["*"]),
        (["127.0.0.1:3141"], []),
        (["127.0.0.1"], ["127.0.0.1"]),
        (["127.0.0.1:5432"], ["127.0.0.1:5432"]),
    ],
)
def test_a_submitter_may_narrow_the_operators_list_never_widen_it(
    wanted: list[str], wider: list[str]
) -> None:
    operator = AllowList.of("pypi.org,*.pythonhosted.org,index.example:8443,127.0.0.1:3141")
    assert operator.wider(wanted) == wider
    narrowed = operator.narrowed(wanted)
    assert [str(p) for p in narrowed.patterns] == [w for w in wanted if w not in wider]


def test_a_narrowed_list_keeps_the_operators_exact_addresses_only() -> None:
    operator = AllowList.of("*,127.0.0.1:3141")
    narrowed = operator.narrowed(["127.0.0.1:3141", "10.0.0.1:80"])
    assert refusal(ipaddress.ip_address("127.0.0.1"), 3141, narrowed) is None
    assert narrowed.permits("10.0.0.1", 80)  # on the list, but not an exact operator entry:
    assert "private" in (refusal(ipaddress.ip_address("10.0.0.1"), 80, narrowed) or "")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("pypi.org:0", "no valid port"),
        ("pypi.org:http", "no valid port"),
        ("::1", "in brackets"),
        ("[::1", "in brackets"),
        ("exa mple.org", "not a host name"),
        # a URL pasted for a host names the host to give; it said "no valid port"
        (
            "http://pypi.org",
            "'http://pypi.org' is a URL, not a host or host:port: give its host, pypi.org$",
        ),
        ("https://files.pythonhosted.org/", "give its host, files.pythonhosted.org$"),
        ("pypi.org/simple", "is a URL, not a host or host:port: give its host, pypi.org$"),
        ("https://u:p@mirror.local:3141/root", "give its host, mirror.local:3141$"),
        ("10.0.0.0/8", "is a network: give hosts, or exact addresses, one by one"),
        ("*.*.org", "not a host name"),
    ],
)
def test_a_bad_pattern_is_refused_with_what_is_wrong(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse(text)


def test_patterns_read_back_as_written() -> None:
    assert [str(p) for p in parse(" pypi.org , [::1]:8080,*.x.org:443,,10.0.0.1")] == [
        "pypi.org",
        "[::1]:8080",
        "*.x.org:443",
        "10.0.0.1",
    ]
    assert Pattern.parse("[::FFFF:127.0.0.1]:80").host == "::ffff:7f00:1"
    assert not AllowList.of("")
