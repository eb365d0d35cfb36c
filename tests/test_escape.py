"""sandboy.escape, the one escaping function every printer uses: properties over any text."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
from printed import FORBIDDEN, PIECES, assert_safe  # noqa: E402

from sandboy import escape  # noqa: E402

any_text = st.text(alphabet=st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF)) | \
    st.lists(st.sampled_from(PIECES), max_size=8).map("".join)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(any_text)
def test_clean_and_line_leave_nothing_a_terminal_or_runner_acts_on(text):
    one = escape.clean(text)
    assert "\n" not in one and not any(ord(c) in FORBIDDEN for c in one)
    assert_safe(escape.line(text).encode("utf-8"))
    assert_safe(escape.block(text).encode("utf-8"))
    assert_safe(escape.key(text).encode("utf-8"))
    assert_safe(escape.markdown(text).encode("utf-8"))
    assert escape.clean(one) == one  # idempotent: cleaning twice shows the same text


def test_readable_text_is_unchanged():
    for text in ("pytest -q", "é ü 日本", "a::b", "C:\\path", "[unit] ok", "50%"):
        assert escape.clean(text) == text and escape.line(text) == text


def test_examples():
    assert escape.clean("a\x1b[31m\r\n\t") == "a\\x1b[31m\\x0d\\x0a\\x09"
    assert escape.clean("\u202egnp.exe") == "\\u202egnp.exe"
    assert escape.clean("\udcff") == "\\udcff"
    assert escape.clean("##[error]x") == "##\\x5berror]x"
    assert escape.line(" \ufeff::error::x") == " \ufeff\\x3a:error::x"
    assert escape.block("ok\n::set-output name=x::y") == "ok\n\\x3a:set-output name=x::y"
    assert escape.key("read") == "read" and escape.key("a b\n") == '"a b\\n"'
    assert escape.clean("x" * 10, limit=4) == "xxxx… (6 more characters)"
    assert escape.markdown("a|b<script>*") == "a\\|b&lt;script&gt;\\*"


def test_key_quotes_as_json_dumps_does():
    """`key` quotes with sandboy.json_text (no `json` import on the error path): json.dumps's text."""
    import json

    names = ["a b", "x\ny", "é", "\u202e", "\udcff", "\U0001f600", '"', "\\", "\x1b[31m", "", "::x", "a.b"]
    for name in names:
        assert escape.key(name) == (name if escape.key(name) == name else escape.clean(json.dumps(name)))
