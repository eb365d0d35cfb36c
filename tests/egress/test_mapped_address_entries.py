"""An entry written as an IPv4-mapped IPv6 address (`[::ffff:10.0.0.1]`) means that IPv4 address,
as a client's does: the proxy compares a client's `[::ffff:10.0.0.1]` and `10.0.0.1` both as
`10.0.0.1`, so before session 8 such a `domains_deny` entry never matched — the address it names
stayed reachable under an allow entry written the other way — and such an allow entry allowed
nothing."""

from sandboy.egress.rules import Rules, meet_domains


def test_a_mapped_deny_entry_denies_the_address_however_the_client_spells_it():
    rules = Rules(["10.0.0.1:443"], ["[::ffff:10.0.0.1]:443"], source="t")
    for spelling in ("10.0.0.1", "[::ffff:10.0.0.1]", "::ffff:a00:1"):
        decision = rules.decide(spelling, 443)
        assert not decision.allowed and "domains_deny" in decision.rule, (spelling, decision)


def test_twin_a_mapped_allow_entry_allows_the_address():
    rules = Rules(["[::ffff:10.0.0.1]:443", "::ffff:10.0.0.2"], source="t")
    assert rules.decide("10.0.0.1", 443).allowed
    assert rules.decide("[::ffff:10.0.0.2]", 80).allowed
    assert not rules.decide("10.0.0.3", 443).allowed
    # and in the gate's meet, one spelling covers the other
    assert meet_domains(["10.0.0.1:443"], ["[::ffff:10.0.0.1]:443"]) == (("10.0.0.1:443",), ())
