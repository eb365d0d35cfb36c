"""`resolve.lookup_changeable` from the attacker's side, checked by the kernel (session 8 review).

The gate looks a path up once (a ceiling grant: RepositoryLinks.fixed; a cage's git-check Scope:
LaunchRecord.scope_for) when `lookup_changeable(path, roots)` says no process writing only inside
`roots` can change what it resolves to. Here that answer is tested against what such a process
can do: every entry of every directory inside the roots is moved away (renamed out, as a step
could unlink it) and a symlink to a decoy put in its place (as a step could plant one). A path
judged unchangeable must then still resolve to the same inode (or stay missing); for each layout
one path the rule must call changeable is checked to really change — a rule that answered
"unchangeable" everywhere fails there. Layouts: links outside the roots whose targets climb into a
root with `..`, chains that leave a root and come back, a root reached through a link, `..`
applied just after a root, a missing name beside a root, a link loop."""

from __future__ import annotations

import os

import pytest

from sandboy.policy.resolve import lookup_changeable


def _resolved(path):
    try:
        st = os.stat(path)
    except OSError as exc:
        return ("missing", exc.errno)
    return (st.st_dev, st.st_ino)


def _attack(roots, held, decoy):
    """What a process writing only inside `roots` can do: each name there replaced by a link."""
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root, topdown=False):
            for name in dirnames + filenames:
                entry = os.path.join(dirpath, name)
                if os.path.islink(entry) or not os.path.isdir(entry):
                    os.rename(entry, os.path.join(held, f"{len(os.listdir(held))}-{name}"))
                    os.symlink(decoy, entry)
        for name in os.listdir(root):  # directories emptied above: now replaced too
            entry = os.path.join(root, name)
            if not os.path.islink(entry):
                os.rename(entry, os.path.join(held, f"{len(os.listdir(held))}-{name}"))
                os.symlink(decoy, entry)


def _layout(base):
    os.makedirs(f"{base}/w/repo/sub/deep")
    os.makedirs(f"{base}/w/out")
    os.makedirs(f"{base}/srv/tools/bin")
    os.makedirs(f"{base}/etc/app")
    (open(f"{base}/etc/app/conf", "w")).close()
    (open(f"{base}/w/repo/sub/deep/file", "w")).close()
    os.symlink("../w/repo/sub", f"{base}/srv/into-repo")           # outside, climbs into a root
    os.symlink("../../etc/app", f"{base}/w/repo/to-etc")           # inside a root, leads out
    os.symlink(f"{base}/w/repo", f"{base}/srv/repo-link")          # a root reached through a link
    os.symlink("../srv/tools", f"{base}/etc/tools-link")           # outside to outside
    os.symlink(f"{base}/srv/loop-b", f"{base}/srv/loop-a")
    os.symlink(f"{base}/srv/loop-a", f"{base}/srv/loop-b")
    os.symlink("repo/../../etc/app", f"{base}/w/up-through-root")  # in w (not a root): .. after a root
    return (f"{base}/w/repo", f"{base}/w/out")


@pytest.mark.parametrize("relative, expect_changeable", [
    ("srv/tools/bin", False),
    ("etc/tools-link/bin", False),
    ("w/repo", False),                       # a root is an entry of its parent
    ("srv/repo-link", False),                # ... also through a link outside
    ("w/up-through-root", False),            # `..` just after a root reads nothing inside it
    ("w/missing/x", False),                  # missing beside the roots: stays missing
    ("srv/into-repo/deep/file", True),       # outside link climbing into a root
    ("srv/repo-link/sub", True),
    ("w/repo/to-etc/conf", True),            # the link inside the root can be repointed
    ("w/out/anything", True),
    ("srv/loop-a/x", True),                  # ELOOP: no proof
])
def test_a_path_judged_unchangeable_resolves_the_same_after_everything_a_step_can_do(tmp_path, relative,
                                                                                     expect_changeable):
    base = str(tmp_path / "fs")
    roots = _layout(base)
    held = tmp_path / "held"
    held.mkdir()
    decoy = tmp_path / "decoy"
    (decoy / "deep").mkdir(parents=True)
    (decoy / "deep" / "file").write_text("decoy")
    (decoy / "conf").write_text("decoy")
    (decoy / "anything").write_text("decoy")
    (decoy / "sub").mkdir()
    path = f"{base}/{relative}"
    judged = lookup_changeable(path, roots)
    before = _resolved(path)
    _attack(roots, str(held), str(decoy))
    after = _resolved(path)
    if not judged:
        assert after == before, f"{relative}: judged unchangeable, but a writer inside the roots changed it"
    elif before[0] != "missing" and relative != "srv/loop-a/x":
        assert after != before, f"{relative}: the attack did not reach it (the probe would prove nothing)"
    assert judged == expect_changeable, (relative, judged)  # (a needless "changeable" costs a lookup a step)
