"""The one "is this path inside that root" rule, the one `{policy_dir}` rule and the one PATH
search (policy.resolve)."""

import pytest

from sandboy.policy.model import Policy
from sandboy.policy.resolve import DEFAULT_PATH, is_within, is_within_any, path_candidates, policy_dir


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


@pytest.mark.parametrize("name, path_var, expected", [
    ("tool", "/a:/b", ["/a/tool", "/b/tool"]),
    ("tool", None, [f"{d}/tool" for d in DEFAULT_PATH.split(":")]),  # PATH unset: the default search
    ("tool", "", ["./tool"]),                 # PATH set but empty: the working directory, as execvp
    ("tool", "/a::/b", ["/a/tool", "./tool", "/b/tool"]),
    ("./tool", "/a", ["./tool"]),             # a name with a slash is not searched
    ("/usr/bin/true", None, ["/usr/bin/true"]),
])
def test_path_candidates_is_execvps_search(name, path_var, expected):
    assert path_candidates(name, path_var) == expected


def _is_within_as_written(path: str, root: str) -> bool:
    """is_within's rule in its plain form (the function avoids building root + "/")."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def test_is_within_agrees_with_its_plain_rule_on_every_pair():
    """Every pair of a set of paths and roots, normalized or not: '/a/bc' is not within '/a/b',
    '/' holds everything absolute, trailing and doubled slashes as the plain rule reads them."""
    from itertools import product

    names = ["", "/", "//", "/a", "/a/", "/a//", "/a/b", "/a/bc", "/a/b/c", "/ab", "/a/b/", "a", "a/b", "/b",
             "/a/b/c/d", "/a\u00e9", "/a/./b", "/a/../a/b"]
    for path, root in product(names, repeat=2):
        assert is_within(path, root) == _is_within_as_written(path, root), (path, root)
