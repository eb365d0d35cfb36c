"""What every printed byte of Sandboy must satisfy, and hostile text to feed it (issue 8, items
2 and 7). Shared by tests/gate/test_gate_escaping.py and tests/audit/test_audit_escaping.py."""

from __future__ import annotations

from hypothesis import strategies as st

# Characters a terminal or a CI log acts on, and lines GitHub's runner reads as commands.
FORBIDDEN = {*range(0x00, 0x0A), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029,
             *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x061C, 0x200E, 0x200F}
BLANKS = " \t\n\v\f\r\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008" \
         "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"

FORGED = "::error file=a.py,line=1::forged"
PIECES = ["\x1b[31m", "\x1b]0;owned\x07", "\r", "\n", "\r\n", "\t", "\x00", "\x7f", "\x85", "\x9b", "\u2028",
          "\u2029", "\u202e", "\u2066", "\ufeff", "\xa0", " ", "::", "##[", "##[error]x", FORGED,
          "\n" + FORGED, "\n  " + FORGED, "\u2028" + FORGED, "::add-mask::s3cret", "a", "é", "/", "x.toml", "%0A"]

evil_text = st.lists(st.sampled_from(PIECES), min_size=1, max_size=6).map("".join)
# printable only: what a step name may hold (the gate refuses other names)
PRINTABLE = [p for p in PIECES if p.isprintable() and p.strip() == p and p]
evil_printable = st.lists(st.sampled_from(PRINTABLE), min_size=1, max_size=4).map("".join)


def assert_safe(raw: bytes, where: str = "output") -> None:
    """No control character, no line a CI runner reads as a workflow command."""
    text = raw.decode("utf-8")  # strict: valid UTF-8 only
    bad = sorted({f"U+{ord(c):04X}" for c in text if ord(c) in FORBIDDEN or 0xD800 <= ord(c) < 0xE000})
    assert not bad, f"{where} holds raw control characters {bad}:\n{text[:3000]}"
    for line in text.split("\n"):
        assert not line.lstrip(BLANKS).startswith("::"), f"{where} holds a forged command line: {line!r}"
        assert "##[" not in line, f"{where} holds a legacy workflow command: {line!r}"


def toml_str(text: str) -> str:
    """A TOML basic string for any text (every control and non-ASCII character escaped)."""
    out = []
    for c in text:
        o = ord(c)
        if c in '"\\':
            out.append("\\" + c)
        elif 0x20 <= o < 0x7F:
            out.append(c)
        elif o <= 0xFFFF:
            out.append(f"\\u{o:04X}")
        else:
            out.append(f"\\U{o:08X}")
    return '"' + "".join(out) + '"'
