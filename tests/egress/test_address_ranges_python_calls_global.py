"""Addresses Python 3.11's `ipaddress` calls global that no host on the internet has (session 8
review, after the NAT64 row): the IPv4-translated prefix `::ffff:0:0:0/96` (RFC 2765's SIIT — a
translator delivers `::ffff:0:a9fe:a9fe` to 169.254.169.254, as a NAT64 gateway does
`64:ff9b::a9fe:a9fe`), the deprecated site-local `fec0::/10` (RFC 3879; still routed as
ordinary unicast by Linux where configured), the IPv6 documentation prefix `3fff::/20`
(RFC 9637) and SRv6 SIDs `5f00::/16` (RFC 9602). An allowed name answering one of them was
connected to."""

import pytest

from sandboy.egress.rules import Rules


@pytest.mark.parametrize("address, says", [
    ("::ffff:0:a9fe:a9fe", "169.254.169.254"),
    ("::ffff:0:7f00:1", "127.0.0.1"),
    ("::ffff:0:a00:1", "10.0.0.1"),
    ("fec0::1", "fec0::1"),
    ("feff:ffff::1", "feff:ffff::1"),
    ("3fff::1", "3fff::1"),
    ("5f00::1", "5f00::1"),
])
def test_special_ranges_python_calls_global_are_refused(address, says):
    why = Rules(["a.org"]).address_refusal(address)
    assert why and says in why, (address, why)


def test_twins_neighbours_that_are_global_still_pass():
    for address in ("2606:4700::6810:84e5", "2a00:1450::1", "2001:4860:4860::8888", "2620:fe::fe"):
        assert Rules(["a.org"]).address_refusal(address) is None, address
    # the translated form of a global IPv4 address is refused only as what it carries
    assert Rules(["a.org"]).address_refusal("::ffff:0:9765:df") is None  # 151.101.0.223
    assert Rules(["a.org"], private=["169.254.0.0/16"]).address_refusal("::ffff:0:a9fe:a9fe") is None
    assert Rules(["a.org"], private=["fec0::/10"]).address_refusal("fec0::1") is None
