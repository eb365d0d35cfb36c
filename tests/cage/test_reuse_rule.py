"""`reuse.Reuse`, the one rule for when a compiled cage may run another command (the API's
`for_run` and the gate's `CageCache`), judged without the kernel: the cages here are stand-ins
that answer the three questions the rule asks of a cage (does a rebuild still give the same rules —
`still_valid()`; does it have a fingerprint at all; where is its `{tmp}` and does the namespace
tier give each run a private one). What is checked is the rule's own decisions: a stale cage is
closed and never handed out again, a cage that cannot be checked or whose `{tmp}` would be shared
is the caller's alone, the oldest cage goes first past the limit, and a host `{tmp}` is emptied
(on disk, here) before a kept cage runs again. The real cages' answers are tested in
test_reuse.py, test_reuse_protected.py and test_namespaces.py."""

from __future__ import annotations

from types import SimpleNamespace

from sandboy.confine.reuse import Reuse


class StandIn:
    """A compiled cage as far as `Reuse` looks at one."""

    def __init__(self, name: str, tmp: str | None = None, tier_tmp: bool = False, fingerprint=True):
        self.name = name
        self.valid = True
        self.fingerprint = object() if fingerprint else None
        self.ctx = SimpleNamespace(tmp=tmp)
        self.tier = SimpleNamespace(tmp_private=True) if tier_tmp else None
        self.closed = 0
        self.close_ok = True

    def still_valid(self) -> bool:
        return self.valid

    def close(self, deadline=None) -> bool:
        self.closed += 1
        return self.close_ok


class Maker:
    """`make` for `Reuse.get`: a new stand-in per call, all of them kept for the test to look at."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.made: list[StandIn] = []

    def __call__(self) -> StandIn:
        self.made.append(StandIn(f"cage{len(self.made)}", **self.kwargs))
        return self.made[-1]


def test_a_cage_still_valid_is_handed_out_again_and_stays_the_rules():
    reuse, make = Reuse(), Maker()
    first, owned = reuse.get("k", make)
    again, owned_again = reuse.get("k", make)
    assert again is first and not owned and not owned_again and len(make.made) == 1
    assert first.closed == 0


def test_a_stale_cage_is_closed_and_never_handed_out_again():
    """A rebuild would give other rules (a policy path moved, a split directory changed): the kept
    cage must not run the next command — closed, and a new one built and kept in its place."""
    reuse, make = Reuse(), Maker()
    first, _ = reuse.get("k", make)
    first.valid = False
    second, owned = reuse.get("k", make)
    assert second is not first and not owned and first.closed == 1
    assert reuse.get("k", make)[0] is second and len(make.made) == 2


def test_a_cage_without_a_fingerprint_is_the_callers_alone():
    """Nothing can tell whether it is still valid: never kept, the caller closes it."""
    reuse, make = Reuse(), Maker(fingerprint=False)
    first, owned = reuse.get("k", make)
    second, owned_second = reuse.get("k", make)
    assert owned and owned_second and second is not first and reuse.cages == {}


def test_past_the_limit_the_least_recently_used_cage_is_closed():
    reuse, make = Reuse(limit=2), Maker()
    a, _ = reuse.get("a", make)
    b, _ = reuse.get("b", make)
    assert reuse.get("a", make)[0] is a  # a used again: b is now the oldest
    c, _ = reuse.get("c", make)
    assert (a.closed, b.closed, c.closed) == (0, 1, 0)
    assert list(reuse.cages) == ["a", "c"]
    assert reuse.get("b", make)[0] is not b  # built anew, never the closed one


def test_a_host_tmp_is_never_shared_unless_emptied_between_runs(tmp_path):
    """Without the tier `{tmp}` is a host directory: the API's runs may overlap, so such a cage is
    not kept (owned); the gate runs one step at a time and asks for it to be emptied instead —
    on disk, before the kept cage runs again."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    api, make = Reuse(), Maker(tmp=str(tmp))
    assert api.get("k", make)[1] and api.get("k", make)[1] and api.cages == {}

    gate, make = Reuse(empty_tmp=True), Maker(tmp=str(tmp))
    first, owned = gate.get("k", make)
    assert not owned
    (tmp / "left-by-the-last-step").write_text("x")
    (tmp / "sub").mkdir()
    (tmp / "sub" / "deeper").write_text("x")
    assert gate.get("k", make)[0] is first
    assert list(tmp.iterdir()) == [] and tmp.is_dir()


def test_a_host_tmp_that_cannot_be_emptied_makes_a_new_cage(tmp_path):
    """Emptying failed (here: the directory is gone): the kept cage is closed, not run over what
    the last step left."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    gate, make = Reuse(empty_tmp=True), Maker(tmp=str(tmp))
    first, _ = gate.get("k", make)
    tmp.rmdir()
    second, owned = gate.get("k", make)
    assert second is not first and first.closed == 1 and owned  # the new one cannot be emptied either


def test_under_the_tier_each_run_has_its_own_tmp_and_the_cage_is_kept(tmp_path):
    """The tier mounts a fresh tmpfs at `{tmp}` for every run: nothing to empty on the host."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp / "untouched").write_text("x")
    reuse, make = Reuse(), Maker(tmp=str(tmp), tier_tmp=True)
    first, owned = reuse.get("k", make)
    assert not owned and reuse.get("k", make)[0] is first
    assert (tmp / "untouched").exists()


def test_close_ends_every_kept_cage_and_names_the_tmp_left_behind(tmp_path):
    reuse, make = Reuse(), Maker(tmp=str(tmp_path), tier_tmp=True)
    kept = [reuse.get(key, make)[0] for key in ("a", "b")]
    kept[1].close_ok = False
    assert reuse.close() == [str(tmp_path)]
    assert [cage.closed for cage in kept] == [1, 1] and reuse.cages == {}
