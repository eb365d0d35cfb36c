"""The one way text from outside reaches a person: a terminal, a CI log, GitHub's workflow-command
parser or a Markdown summary.

Everything Sandboy prints may quote what a repository, a step, a policy file, a report or a guest
adapter wrote: step names and output, policy references, unknown keys, paths, SARIF keys and
messages. Printed raw, such text repaints the terminal (escape sequences, `\\r`), forges whole
lines (`\\n`) and, on GitHub Actions, issues workflow commands: a line whose first non-blank
characters are `::` (`::error file=a.py::forged`, `::add-mask::`), or `##[` anywhere in a line
(the runner's legacy syntax). So every printer passes untrusted text through `clean` (one field)
and whole lines through `line` / `block`:

* every control character — C0 (tab and newline included), DEL, C1 — the Unicode line and
  paragraph separators and the bidirectional overrides (which reorder what a reviewer reads) is
  shown as a visible escape (`\\x1b`, `\\u2028`); a lone surrogate (undecodable bytes) as `\\udcff`
  (printing it would otherwise raise UnicodeEncodeError);
* `##[` is shown as `##\\x5b`;
* a line that would start with `::` after leading blanks gets its first colon escaped (`\\x3a:`).

Stdlib only and no `re`: `sandboy run` imports this on its error path (start-up stays lean).
"""

# No `from __future__ import annotations`: it imports the `__future__` module at run time
# (≈ 0.59 M instructions, ≈ 0.13 ms), and this module is on `sandboy run`'s warning and error paths (docs/performance.md,
# session 7). Python >= 3.11 evaluates these annotations as written.

_ESCAPES: dict[int, str] = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0))}
for _c in (0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)):
    _ESCAPES[_c] = f"\\u{_c:04x}"
del _c

# What GitHub's runner (and actions/toolkit) strip before looking for `::`: .NET's TrimStart /
# JavaScript's trimStart whitespace, BOM included.
_BLANKS = " \t\n\v\f\r\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008" \
          "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"


def clean(text, limit: int | None = None) -> str:
    """One field of untrusted text, made safe to print inside a line (see the module docstring).
    `limit`: at most that many characters of the input, then `… (N more characters)`."""
    text = str(text)
    more = ""
    if limit is not None and len(text) > limit:
        more = f"… ({len(text) - limit:,} more characters)"
        text = text[:limit]
    text = text.translate(_ESCAPES)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates (surrogateescape'd bytes, JSON "\ud800")
            text = "".join(f"\\u{ord(c):04x}" if 0xD800 <= ord(c) < 0xE000 else c for c in text)
    if "##[" in text:
        text = text.replace("##[", "##\\x5b")
    return text + more


def line(text) -> str:
    """A whole line about to be printed: `clean`, and never a line GitHub reads as a command."""
    text = clean(text)
    body = text.lstrip(_BLANKS)
    if body.startswith("::"):
        text = text[: len(text) - len(body)] + "\\x3a" + body[1:]
    return text


def block(text) -> str:
    """Several lines Sandboy composed (its own `\\n` between them, untrusted parts already
    `clean`ed): every line passes `line`."""
    return "\n".join(line(part) for part in str(text).split("\n"))


# What json.dumps leaves raw (it escapes C0 only, and with ensure_ascii=False nothing beyond):
# DEL, C1 (U+009B is CSI to an 8-bit terminal), the line separators and the bidi controls. In JSON
# text these stand only inside strings, where `\uXXXX` is the same character to a parser.
_JSON_ESCAPES: dict[int, str] = {c: f"\\u{c:04x}" for c in _ESCAPES if c >= 0x7F}


def json_output(text: str) -> str:
    """JSON text about to be written where a person or GitHub's runner reads it (stdout): the
    same values to any JSON parser, but none of the characters above raw and no `##[` (the
    runner's legacy workflow-command syntax, read anywhere in a line; `##\\u005b` parses as
    `##[`). `::` cannot start a line of JSON text. Files (`-o`, reports) keep json.dumps' bytes."""
    text = text.translate(_JSON_ESCAPES)
    return text.replace("##[", "##\\u005b") if "##[" in text else text


_BARE_KEY = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def key(name) -> str:
    """A key from an untrusted file as TOML would write it: bare when it can be, else quoted
    with JSON/TOML escapes (`"evil\\u001b[31mkey\\nforged"`), so it can neither break the one-line
    `FILE: key: problem` message nor hide where it starts and ends."""
    name = str(name)
    if name and set(name) <= _BARE_KEY:
        return name
    from sandboy.json_text import string  # json.dumps(name)'s text, without json's ≈ 8 ms import

    return clean(string(name))  # ensure_ascii: every non-ASCII character is a \u escape


def markdown(text) -> str:
    """A Markdown table cell (`$GITHUB_STEP_SUMMARY`): `line`, then no pipes, no HTML, no
    emphasis, links or code spans from untrusted names and messages. GitHub's Markdown (cmark-gfm)
    also makes links of bare `https://…`, `www.…` and `a@b.c` (session 10: a step named
    `https://evil.example/login` was a link in the summary): `://` and `www.` lose to an escape
    the character its autolink extension looks for, and `@` becomes a code span of its own
    (cmark-gfm finds e-mail addresses in the text after escapes are read: `\\@` still linked)."""
    escaped = line(text).replace("\\", "\\\\").replace("&", "&amp;").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "`*_[]!#~":
        escaped = escaped.replace(ch, "\\" + ch)
    escaped = escaped.replace("://", "\\://")
    if "@" in escaped or "." in escaped:
        import re

        escaped = re.sub(r"@+", lambda m: f"`{m.group()}`", escaped)  # `@@`: one span, not "`@``@`"
        escaped = re.sub(r"(?i)(www)\.", r"\1\\.", escaped)
    return escaped


__all__ = ["clean", "line", "block", "key", "markdown", "json_output"]
