"""How `net.domains` is enforced for a kernel (`enforcement.egress_mode`, the one decision the cage
and `sandboy doctor` share): a network namespace where the tier can make one, else Landlock's TCP
rules (ABI 4+) confining the command to the proxy's port, else refused. Checked for every ABI
without the kernel; tests/egress/test_run.py runs both modes for real."""

import pytest

from sandboy.egress.enforcement import MODE_FALLBACK, MODE_NAMESPACE, egress_mode


@pytest.mark.parametrize("abi", range(0, 9))
def test_a_namespace_is_used_whatever_landlock_has(abi):
    assert egress_mode(True, abi) == MODE_NAMESPACE


@pytest.mark.parametrize("abi, mode", [(0, None), (1, None), (2, None), (3, None), (4, MODE_FALLBACK),
                                       (5, MODE_FALLBACK), (6, MODE_FALLBACK), (7, MODE_FALLBACK)])
def test_without_a_namespace_only_landlock_tcp_rules_allow_the_fallback(abi, mode):
    # None: the cage refuses a net.domains policy (125) rather than let the command reach any host
    assert egress_mode(False, abi) == mode
