"""The one "is this path inside that root" rule and the one `{policy_dir}` rule (policy.resolve)."""

import pytest

from sandboy.policy.model import Policy
from sandboy.policy.resolve import is_within, is_within_any, policy_dir


@pytest.mark.parametrize("path, root, inside", [
    ("/a/b", "/a/b", True),
    ("/a/b/c", "/a/b", True),
    ("/a/b/c", "/a/b/", True),
    ("/a/bc", "/a/b", False),    # a shared prefix is not a parent
    ("/a", "/a/b", False),
    ("/anything", "/", True),
    ("/", "/", True),
])
def test_is_within_compares_whole_components(path, root, inside):
    assert is_within(path, root) is inside


@pytest.mark.parametrize("path, roots, inside", [
    ("/a/b/c", ["/x", "/a/b"], True),     # any one root is enough
    ("/a/bc", ["/x", "/a/b"], False),     # whole components, as is_within
    ("/a/b", [], False),                  # no roots: nothing is inside
    ("/a/b", ("/",), True),
    ("/proc/1", iter(["/sys", "/proc"]), True),   # any iterable, read once
])
def test_is_within_any_is_is_within_for_some_root(path, roots, inside):
    assert is_within_any(path, roots) is inside


def test_policy_dir_is_the_files_directory_or_the_fallback(tmp_path):
    path = tmp_path / "sub" / "p.toml"
    path.parent.mkdir()
    path.write_text("version = 1\n")
    assert policy_dir(Policy.load(path, use_cache=False), "/fallback") == str(tmp_path / "sub")
    assert policy_dir(Policy.from_mapping({"version": 1}, "<built-in ceiling>"), "/fallback") == "/fallback"
    # a step table inside gate.toml names no file of its own
    assert policy_dir(Policy.from_mapping({"version": 1}, f"{path} [policy.x]"), "/gate") == "/gate"
