"""Red-team: IPv6 spellings of addresses the proxy must not reach (docs/egress.md, "Decision").

Python 3.11's `is_global` is True for NAT64 (`64:ff9b::/96`, and the local-use `64:ff9b:1::/48`),
IPv4-compatible (`::/96`) and 6to4 (`2002::/16`) addresses, so an allowed name whose AAAA answer
was `64:ff9b::a9fe:a9fe` passed the check and the proxy would connect, through a NAT64 gateway,
to 169.254.169.254 (cloud metadata) or, with `64:ff9b::a00:1`, to 10.0.0.1.
"""

import pytest

from sandboy.egress.rules import Rules


@pytest.mark.parametrize("address, stands_for", [
    ("64:ff9b::a9fe:a9fe", "169.254.169.254"),
    ("64:ff9b::a00:1", "10.0.0.1"),
    ("64:ff9b::7f00:1", "127.0.0.1"),
    ("::127.0.0.1", "127.0.0.1"),
    ("2002:a9fe:a9fe::1", "169.254.169.254"),
    ("2002:7f00:1::1", "127.0.0.1"),
    ("64:ff9b:1::a9fe:a9fe", None),
])
def test_ipv6_forms_of_internal_ipv4_addresses_are_refused(address, stands_for):
    why = Rules(["a.org"]).address_refusal(address)
    assert why, address
    if stands_for:
        assert stands_for in why, why


def test_twins_global_and_listed_private_still_pass():
    assert Rules(["a.org"]).address_refusal("64:ff9b::9765:df") is None  # 151.101.0.223 via NAT64
    assert Rules(["a.org"]).address_refusal("2606:4700::6810:84e5") is None
    assert Rules(["a.org"], private=["10.0.0.0/8"]).address_refusal("64:ff9b::a00:1") is None
    assert Rules(["a.org"], private=["fd00::/8"]).address_refusal("fd00::5") is None
