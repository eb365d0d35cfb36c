"""The one "is this path inside that root" rule, the one `{policy_dir}` rule and the one PATH
search (policy.resolve)."""

import os

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


def test_a_path_set_answers_as_is_within_any_does() -> None:
    """PathSet.covers looks a path's parents up in a set; it must answer exactly as comparing
    with every root (`is_within_any`), also for roots and paths not written normally."""
    import random

    from sandboy.policy.resolve import PathSet, is_within_any

    rng = random.Random(5)

    def spelling() -> str:
        body = "/".join(rng.choice(["a", "b", "ab", "a.b", "", "c"]) for _ in range(rng.randint(0, 4)))
        return rng.choice(["/", "", "//"]) + body + rng.choice(["", "/", ""])

    for _ in range(5000):
        roots = [spelling() for _ in range(rng.randint(0, 5))]
        paths = PathSet(roots)
        for path in (spelling() for _ in range(10)):
            assert paths.covers(path) == is_within_any(path, roots), (path, roots)


def test_the_tiers_write_roots_of_thousands_of_grants_are_found_in_linear_time() -> None:
    """namespaces.write_roots kept the topmost of a step policy's write grants by comparing each
    with every one kept so far (8,000: 27 s before the command ran). Pure: no file is looked at."""
    import time

    from sandboy.confine import landlock, namespaces

    grants = {f"/r/d{i}": landlock.WRITE for i in range(20000)}
    grants.update({f"/r/d{i}/sub": landlock.WRITE for i in range(0, 20000, 2)})  # beneath a kept one
    grants.update({"/r/d1-x": landlock.WRITE, "/r/ro": landlock.READ})
    started = time.process_time()
    top = namespaces.write_roots(grants, None)
    assert time.process_time() - started < 5  # ≈ 0.1 s; the quadratic one: minutes
    assert top == sorted([f"/r/d{i}" for i in range(20000)] + ["/r/d1-x"])


@pytest.mark.parametrize("path_var", ["", ":", "/a:/b/:/c//:", "::/x::", "relative:./r/:../up", "/", "//", "a/b/"])
@pytest.mark.parametrize("name", ["tool", "", "t.sh"])
def test_path_candidates_joins_as_os_path_join(name, path_var):
    """Built without os.path.join (its Python ran for every PATH entry of every preset program at
    each policy load): the same strings."""
    assert path_candidates(name, path_var) == [os.path.join(d or ".", name) for d in path_var.split(":")]
