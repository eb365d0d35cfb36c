"""Property test: for random policies in the accepted pattern language, the canonical decision
(`model.decide`, what every target is measured against) equals git's own (`git check-ignore
--no-index`) on the generated ignore file, for random paths."""

import subprocess

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sandboy.capability.model import parse_pattern
from sandboy.errors import PolicyError

SEGMENT = st.sampled_from(["a", "b", "*", "a*", "*b", "**", "*.e"])  # no `?`: refused (session 10)
PATH_SEGMENT = st.sampled_from(["a", "b", "ab", "x.e"])


@st.composite
def patterns(draw):
    text = "/".join(draw(st.lists(SEGMENT, min_size=1, max_size=3)))
    if draw(st.booleans()):
        text = "/" + text
    if draw(st.booleans()):
        text += "/"
    if draw(st.integers(0, 3)) == 0:
        text = "!" + text
    try:
        return parse_pattern("t", "k", text, negatable=True)
    except PolicyError:
        return None


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    path = tmp_path_factory.mktemp("git")
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pats=st.lists(patterns(), min_size=1, max_size=4),
       paths=st.lists(st.lists(PATH_SEGMENT, min_size=1, max_size=4).map("/".join), min_size=1, max_size=8))
@example(pats=["a/", "!a/b", "!b"], paths=["a/b", "c/a/b", "b", "a"])          # no re-include inside an excluded dir
@example(pats=["*.e", "!/x.e", "a/**/b"], paths=["x.e", "a/x.e", "a/b", "a/a/a/b", "b/a/b"])
def test_canonical_decision_equals_git(work, pats, paths):
    from sandboy.capability.model import decide

    pats = [parse_pattern("t", "k", p, negatable=True) if isinstance(p, str) else p for p in pats]
    pats = [p for p in pats if p is not None]
    (work / ".gitignore").write_text("".join(p.gitignore() + "\n" for p in pats))
    run = subprocess.run(["git", "-C", str(work), "check-ignore", "--no-index", "--stdin"],
                         input="\n".join(paths) + "\n", capture_output=True, text=True, timeout=60)
    assert run.returncode in (0, 1), run.stderr
    ignored = set(run.stdout.split())
    for path in paths:
        hit = decide(pats, path)
        assert (hit is not None and not hit.negated) == (path in ignored), (path, [p.text for p in pats])
