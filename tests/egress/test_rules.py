"""net.domains / net.domains_deny / net.private: validation, decisions, the gate's meet."""

from __future__ import annotations

import pytest

from sandboy.errors import PolicyError
from sandboy.egress.rules import EntryError, Rules, meet_domains, parse_entry, split_authority
from sandboy.policy.model import Policy


@pytest.mark.parametrize("text, host, ports, wildcard, ip", [
    ("pypi.org", "pypi.org", (80, 443), False, False),
    ("PyPI.org:8443", "pypi.org", (8443,), False, False),
    ("*.pythonhosted.org", "pythonhosted.org", (80, 443), True, False),
    ("github.com:22", "github.com", (22,), False, False),
    ("10.0.0.1", "10.0.0.1", (80, 443), False, True),
    ("[::1]:8080", "::1", (8080,), False, True),
    ("[2001:DB8::1]", "2001:db8::1", (80, 443), False, True),
    ("fe80::1", "fe80::1", (80, 443), False, True),
])
def test_entries(text, host, ports, wildcard, ip):
    e = parse_entry(text)
    assert (e.host, e.ports, e.wildcard, e.ip) == (host, ports, wildcard, ip)


@pytest.mark.parametrize("text, fragment", [
    ("*", "'*' only as a leading"), ("a.*.org", "'*' only"), ("*x.org", "'*' only"), ("x.org.", "trailing dot"),
    ("exa mple.org", "not a host name"), ("127.1", "neither a dotted-quad"), ("0x7f.1", "neither"),
    ("1.2.3.999", "not an IPv4"), ("x.org:0", "bad port"), ("x.org:", "bad port"), ("x.org:²", "bad port"),
    ("[::1", "unclosed"), ("[1.2.3.4]", "IPv6"), ("-a.org", "bad label"), ("a..org", "bad label"),
    ("é.org", "not a host name"), ("", "not a host name"), ("a" * 64 + ".org", "bad label"),
])
def test_bad_entries(text, fragment):
    with pytest.raises(EntryError, match=None) as info:
        parse_entry(text)
    assert fragment in str(info.value)


@pytest.mark.parametrize("text, split", [
    ("pypi.org", ("pypi.org", None)),
    ("pypi.org:8443", ("pypi.org", 8443)),
    ("[::1]", ("[::1]", None)),            # brackets stay: normalize_host and parse_entry strip them
    ("[::1]:22", ("[::1]", 22)),
    (":80", ("", 80)),                     # an empty host is the caller's to refuse
])
def test_split_authority(text, split):
    assert split_authority(text, text) == split


@pytest.mark.parametrize("text, fragment", [
    ("[::1", "unclosed '['"), ("[::1]x", "unexpected 'x' after ']'"), ("a:", "bad port"), ("a:65536", "bad port"),
    ("a:1:2", "bad port"), ("::1", "bad port"),   # a bare IPv6 literal is not an authority
])
def test_split_authority_refuses(text, fragment):
    with pytest.raises(EntryError) as info:
        split_authority(text, "WHOLE")
    assert fragment in str(info.value) and "'WHOLE'" in str(info.value)


def test_the_proxys_authority_is_split_by_the_same_rule():
    from sandboy.egress.proxy import _split_authority

    assert _split_authority("example.com", 80) == ("example.com", 80)
    assert _split_authority("[::1]:8443", None) == ("[::1]", 8443)
    assert _split_authority("example.com", None) == ("example.com", None)  # CONNECT then says it needs a port
    for bad in ("", "[::1", "[::1]x", "a:0", "::1"):
        assert _split_authority(bad, 80) == (None, None), bad


def test_policy_errors_name_file_and_key():
    with pytest.raises(PolicyError) as info:
        Policy.from_mapping({"version": 1, "net": {"domains_deny": ["ok.org", "a.*.org"]}}, "p.toml")
    assert str(info.value).startswith("p.toml: net.domains_deny[1]: ")
    with pytest.raises(PolicyError, match="p.toml: net.domains: cannot be combined with net.unrestricted"):
        Policy.from_mapping({"version": 1, "net": {"domains": ["a.org"], "unrestricted": True}}, "p.toml")
    with pytest.raises(PolicyError, match=r"p.toml: net.private\[0\]: 8.8.8.0/24 is not a private"):
        Policy.from_mapping({"version": 1, "net": {"private": ["8.8.8.0/24"]}}, "p.toml")


def test_decisions_deny_wins_and_names_the_rule():
    rules = Rules(["*.x.org", "x.org", "git.x.org:22", "10.0.0.1:8080"], ["bad.x.org"], source="p.toml")
    assert rules.decide("a.x.org", 443).allowed
    assert rules.decide("A.X.ORG.", 80).allowed  # case and one trailing dot do not matter
    assert not rules.decide("a.x.org", 22).allowed
    assert rules.decide("git.x.org", 22).rule == 'net.domains "git.x.org:22"'
    d = rules.decide("bad.x.org", 443)
    assert not d.allowed and d.rule == 'net.domains_deny "bad.x.org"' and "bad.x.org:443" in d.reason
    assert not rules.decide("evilx.org", 443).allowed
    assert not rules.decide("x.org.evil.com", 443).allowed
    assert rules.decide("10.0.0.1", 8080).allowed and not rules.decide("10.0.0.1", 80).allowed
    for spelled in ("167772161", "10.1", "0xa.0.0.1", "x.org\x00.evil", "x.org/", "[10.0.0.1"):
        assert not rules.decide(spelled, 8080).allowed, spelled


def test_address_checks():
    rules = Rules(["a.org"], private=["127.0.0.0/8"])
    assert rules.address_refusal("127.0.0.1") is None
    assert rules.address_refusal("::ffff:127.0.0.1") is None
    assert rules.address_refusal("151.101.0.223") is None
    for bad in ("10.0.0.1", "169.254.169.254", "::1", "fd00:ec2::254", "100.100.100.200", "0.0.0.0", "224.0.0.1",
                "fe80::1%eth0"):
        assert rules.address_refusal(bad), bad


@pytest.mark.parametrize("step, ceiling, kept", [
    (["a.x.org", "example.com"], ["*.x.org"], ("a.x.org",)),
    (["*.x.org"], ["a.x.org"], ()),
    (["*.a.x.org"], ["*.x.org"], ("*.a.x.org",)),
    (["x.org"], ["*.x.org"], ()),
    (["a.x.org:22"], ["*.x.org"], ()),
    (["a.x.org:443"], ["a.x.org"], ("a.x.org:443",)),
    (["a.x.org"], ["a.x.org:443"], ()),  # bare host = 80 and 443; the ceiling allows only 443
    (["10.0.0.1"], ["*.x.org"], ()),
    (["[::1]:8080"], ["[::1]:8080"], ("[::1]:8080",)),
])
def test_meet_keeps_a_pattern_only_where_the_ceiling_allows_every_host_it_matches(step, ceiling, kept):
    assert meet_domains(step, ceiling)[0] == kept
