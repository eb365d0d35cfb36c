"""Session 10 red team of the gate's step summary: what GitHub's own Markdown makes of it.

`$GITHUB_STEP_SUMMARY` is rendered by GitHub with cmark-gfm, whose autolink extension turns a
bare `https://…`, `www.…` or `name@host.tld` into a link. `escape.markdown` escaped pipes, HTML,
emphasis, `[...]` links and code spans, but a step the repository named
`https://login.evil.example/sso` (or a message quoting one) was a clickable link in the
operator's job summary. Rendered here by cmarkgfm, the Python binding of GitHub's cmark-gfm."""

from __future__ import annotations

import html
import re

import pytest

from gatekit import make_repo, run_gate

cmarkgfm = pytest.importorskip("cmarkgfm")  # a test dependency (pyproject [test]); GitHub's renderer

NAMES = ["https://login.evil.example/sso", "www.evil.example", "ops@evil.example", "HTTP://x.example",
         "ftp://files.evil.example", "mailto:a@evil.example"]


def _rendered(markdown: str) -> str:
    from cmarkgfm.cmark import Options

    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)


def _cells(rendered: str) -> list:
    """The step-name cells of the results table, as a reader sees them (code spans unwrapped)."""
    rows = re.findall(r"<tr>\s*<td>(.*?)</td>", rendered, re.S)
    return [html.unescape(re.sub(r"</?code>", "", cell)) for cell in rows]


def test_a_step_named_like_a_link_is_no_link_in_the_step_summary(tmp_path, fake_home):
    gate = "".join(f'[[step]]\nname = "{name}"\nrun = "echo {name}; exit 3"\nallow_failure = true\n\n'
                   for name in NAMES)
    repo = make_repo(tmp_path, gate)
    summary = tmp_path / "summary.md"
    proc = run_gate(repo, "--keep-going", home=fake_home, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rendered = _rendered(summary.read_text())
    # host side, GitHub's renderer: before the fix each name was an <a href=...>
    assert "<a " not in rendered, rendered
    # and each still reads as the repository wrote it
    assert _cells(rendered) == NAMES


def test_twin_ordinary_names_and_messages_read_the_same_after_rendering(tmp_path, fake_home):
    names = ["unit tests", "lint: ruff 0.14", "build v1.2.3 (x86_64)", "a|b <c> *d* `e` [f](g) #1 ~h~"]
    gate = "".join(f'[[step]]\nname = "{name}"\nrun = "true"\n\n' for name in names)
    repo = make_repo(tmp_path, gate)
    summary = tmp_path / "summary.md"
    proc = run_gate(repo, home=fake_home, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rendered = _rendered(summary.read_text())
    assert "<a " not in rendered and "<em>" not in rendered and "<script" not in rendered
    assert _cells(rendered) == names
