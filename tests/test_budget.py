"""The operator's time budget as written (`budget.parse`, `budget.text`): which values are a
duration and which are an error naming the key — pure decisions, checked without a gate or an
audit run (tests/gate/test_gate_budget.py and tests/audit/test_audit_budget.py run them)."""

import pytest

from sandboy.budget import MOST_SECONDS, parse, text
from sandboy.errors import PolicyError


@pytest.mark.parametrize("value, seconds", [
    (21600, 21600), (0, 0), ("0", 0), ("90", 90), ("90s", 90), ("30m", 1800), ("6h", 21600),
    (" 6h\n", 21600), (MOST_SECONDS, MOST_SECONDS), ("720h", MOST_SECONDS),
])
def test_a_duration_in_seconds_or_with_a_unit(value, seconds):
    assert parse("ceiling.toml", "gate.budget", value) == seconds


@pytest.mark.parametrize("value", [
    True,            # a TOML boolean is not 1 second
    1.5, "1.5h", "6d", "h", "-1", -1, "6 h", "", None, [], "６h",  # a full-width digit: not ASCII
    "\u0663",        # an Arabic-Indic three: str.isdigit() says yes
    MOST_SECONDS + 1, "721h", "9" * 5000,  # 5,000 digits: the range error, not int()'s ValueError
])
def test_anything_else_names_the_file_and_key(value):
    with pytest.raises(PolicyError) as caught:
        parse("ceiling.toml", "gate.budget", value)
    assert caught.value.source == "ceiling.toml" and caught.value.key == "gate.budget"


@pytest.mark.parametrize("seconds, written", [(21600, "6h"), (1800, "30m"), (90, "90s"), (3660, "61m"),
                                              (3601, "3601s"), (0, "0s"), (1.9, "1s")])
def test_a_budget_is_written_back_in_its_largest_whole_unit(seconds, written):
    assert text(seconds) == written
    if seconds == int(seconds):
        assert parse("x", "y", written) == int(seconds)
