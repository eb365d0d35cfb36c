"""meet(step, ceiling) as table tests: the repository can only narrow the operator's ceiling."""

from __future__ import annotations

import os

import pytest

from sandboy.gate import ceiling as ceilings
from sandboy.policy.meet import domain_allowed, meet
from sandboy.policy.model import Policy
from sandboy.policy.resolve import Context, resolve

REPO = "/srv/repo"  # need not exist: paths that do not exist compare as written


def _policy(data: dict, source: str) -> Policy:
    return resolve(Policy.from_mapping({"version": 1, **data}, source),
                   Context(cwd=REPO, repo=REPO, tmp=None, home="/home/op"))


def _meet(step: dict, ceiling: dict):
    policy, narrowings = meet(_policy(step, "step"), _policy(ceiling, "ceiling"))
    return policy, [n.text for n in narrowings]


CEILING_FS = {"fs": {"read": ["/usr", "/etc", "."], "exec": ["/usr/bin"], "write": [".", "{tmp}"],
                     "deny": ["/etc/shadow"]}}

FS_CASES = [
    # (step fs, expected read, exec, write, a fragment of the narrowing text or None)
    ({"read": ["/usr/share"]}, ["/usr/share"], [], [], None),
    ({"read": ["/"]}, ["/usr", "/etc", REPO, "{tmp}"], [], [], "read only on /usr, /etc"),
    ({"read": ["/root"]}, [], [], [], "asked to read /root; the ceiling does not allow it"),
    ({"read": ["{home}/.ssh"]}, [], [], [], "asked to read /home/op/.ssh"),
    ({"write": ["/etc"]}, ["/etc"], [], [], "asked to write /etc; the ceiling allows read"),
    ({"write": ["sub"]}, [], [], [f"{REPO}/sub"], None),
    ({"write": ["{tmp}/x"]}, [], [], ["{tmp}/x"], None),
    ({"write": ["/"]}, ["/usr", "/etc", REPO, "{tmp}"], [], [REPO, "{tmp}"], "write only on"),
    ({"exec": ["/usr/bin"]}, [], ["/usr/bin"], [], None),
    ({"exec": ["/usr/lib"]}, ["/usr/lib"], [], [], "asked to exec /usr/lib; the ceiling allows read"),
    ({"exec": [REPO]}, [REPO], [], [], "asked to exec"),
    ({"read": ["/etc/shadow"]}, [], [], [], "the ceiling denies /etc/shadow"),
    ({"read": ["/opt"], "write": ["/opt"]}, [], [], [], "does not allow it"),
]


@pytest.mark.parametrize("step_fs, read, exec_, write, text", FS_CASES)
def test_fs_meet(step_fs, read, exec_, write, text):
    policy, notes = _meet({"fs": step_fs}, CEILING_FS)
    assert sorted(policy.fs.read) == sorted(read)
    assert list(policy.fs.exec) == exec_
    assert sorted(policy.fs.write) == sorted(write)
    assert "/etc/shadow" in policy.fs.deny  # the ceiling's deny always carries over
    if text is None:
        assert notes == []
    else:
        assert any(text in note for note in notes), notes


def test_fs_absent_section_is_the_ceiling():
    policy, notes = _meet({"env": {"pass": ["GH_TOKEN"]}}, CEILING_FS)
    assert policy.fs == _policy(CEILING_FS, "c").fs
    assert notes == ["asked to pass environment variable GH_TOKEN; the ceiling does not pass it"]


def test_step_deny_unions_with_the_ceiling():
    policy, _ = _meet({"fs": {"read": ["."], "deny": [".env"]}}, CEILING_FS)
    assert set(policy.fs.deny) == {"/etc/shadow", f"{REPO}/.env"}


def test_symlink_is_compared_by_its_target(tmp_path):
    # A repository symlink pointing outside must not smuggle its target in as "inside the repo".
    repo, outside = tmp_path / "repo", tmp_path / "secret"
    repo.mkdir()
    outside.mkdir()
    os.symlink(outside, repo / "link")
    ctx = Context(cwd=str(repo), repo=str(repo), tmp=None)
    ceiling = resolve(Policy.from_mapping({"version": 1, "fs": {"read": ["."]}}, "c"), ctx)
    step = resolve(Policy.from_mapping({"version": 1, "fs": {"read": ["link", "."]}}, "s"), ctx)
    policy, notes = meet(step, ceiling)
    assert policy.fs.read == (str(repo),)
    assert any(f"asked to read {repo}/link" in n.text for n in notes)


NET_CASES = [
    # (step net, ceiling net, expected fields, narrowing fragment or None)
    ({"connect_tcp": [443, 22]}, {"connect_tcp": [443]}, {"connect_tcp": (443,)}, "TCP port 22"),
    ({"bind_tcp": [8080]}, {}, {"bind_tcp": ()}, "bind TCP port 8080"),
    ({"udp": True, "unix": True}, {"udp": True}, {"udp": True, "unix": False}, "unix sockets"),
    ({"unrestricted": True}, {"connect_tcp": [443]}, {"unrestricted": False, "connect_tcp": (443,)},
     "unrestricted network"),
    ({"connect_tcp": [22]}, {"unrestricted": True}, {"connect_tcp": (22,), "unrestricted": False}, None),
    ({"domains": ["a.x.org", "example.com"]}, {"domains": ["*.x.org"]}, {"domains": ("a.x.org",)},
     "asked for network to example.com; the ceiling does not allow it"),
    ({"domains": ["*.x.org"]}, {"domains": ["a.x.org"]}, {"domains": ()}, "*.x.org"),
    ({"domains": ["*.a.x.org"]}, {"domains": ["*.x.org"]}, {"domains": ("*.a.x.org",)}, None),
    ({"domains": ["x.org"]}, {"domains": ["*.x.org"]}, {"domains": ()}, "x.org"),
    ({"domains": ["a.x.org:22"]}, {"domains": ["*.x.org"]}, {"domains": ()}, "a.x.org:22"),
    ({"domains": ["a.x.org:443"]}, {"domains": ["a.x.org"]}, {"domains": ("a.x.org:443",)}, None),
    # (net.private only means something beside net.domains: a policy with it alone is refused)
    ({"domains": ["a.test"], "private": ["127.0.0.1/32"]}, {"domains": ["a.test"], "private": ["127.0.0.0/8"]},
     {"private": ("127.0.0.1/32",)}, None),
    ({"domains": ["a.test"], "private": ["10.0.0.0/8"]}, {"domains": ["a.test"], "private": ["127.0.0.0/8"]},
     {"private": ()}, "10.0.0.0/8"),
]


@pytest.mark.parametrize("step_net, ceiling_net, expected, text", NET_CASES)
def test_net_meet(step_net, ceiling_net, expected, text):
    policy, notes = _meet({"net": step_net}, {"net": ceiling_net})
    for key, value in expected.items():
        assert getattr(policy.net, key) == value, key
    if text is None:
        assert notes == []
    else:
        assert any(text in note for note in notes), notes


def test_domain_patterns():
    assert domain_allowed("a.b.x.org", ["*.x.org"])
    assert not domain_allowed("evilx.org", ["*.x.org"])
    assert not domain_allowed("x.org.evil.com", ["*.x.org"])
    assert domain_allowed("[::1]:8080", ["[::1]:8080"])


def test_seccomp_meet():
    policy, notes = _meet({"seccomp": {"deny": ["chroot"], "allow": ["ptrace", "bpf"]}},
                          {"seccomp": {"deny": ["acct"], "allow": ["ptrace"]}})
    assert set(policy.seccomp.deny) == {"chroot", "acct"}
    assert policy.seccomp.allow == ("ptrace",)
    assert notes == ["asked to allow system call bpf; the ceiling does not allow it"]
    # a call the ceiling denies is never allowed, even when the ceiling also lists it in allow
    policy, _ = _meet({"seccomp": {"allow": ["ptrace"]}}, {"seccomp": {"deny": ["ptrace"], "allow": ["ptrace"]}})
    assert policy.seccomp.allow == ()


@pytest.mark.parametrize("asked, allowed, expected, narrowed", [
    (True, True, True, False), (True, False, False, True), (False, True, False, False), (None, False, False, False),
    (None, True, True, False),  # an absent section is the ceiling's
])
def test_ipc_meet(asked, allowed, expected, narrowed):
    step = {} if asked is None else {"ipc": {"sysv": asked}}
    policy, notes = _meet(step, {"ipc": {"sysv": allowed}})
    assert policy.ipc.sysv is expected
    assert notes == (["asked for SysV IPC (shm/msg/sem); the ceiling does not allow it"] if narrowed else [])


def test_builtin_ceiling_refuses_sysv_ipc():
    assert ceilings.builtin().ipc.sysv is False


def test_env_meet():
    policy, notes = _meet({"env": {"pass": ["HOME", "AWS_SECRET_ACCESS_KEY"], "set": {"A": "1", "CI": "no"}}},
                          {"env": {"pass": ["HOME", "PATH"], "set": {"CI": "true"}}})
    assert policy.env.pass_ == ("HOME",)
    assert dict(policy.env.set) == {"A": "1", "CI": "true"}
    assert any("AWS_SECRET_ACCESS_KEY" in n for n in notes) and any("set CI" in n for n in notes)


LIMIT_CASES = [
    # (step, ceiling, expected, narrowed?)
    (10, 100, 10, False),
    (1000, 100, 100, True),
    (0, 100, 100, False),   # 0 / absent in a step means "as the ceiling"
    (50, 0, 50, False),     # the ceiling sets no limit: the step's own limit stands
    (0, 0, 0, False),
]


@pytest.mark.parametrize("asked, cap, expected, narrowed", LIMIT_CASES)
def test_limits_take_the_minimum(asked, cap, expected, narrowed):
    policy, notes = _meet({"limits": {"processes": asked}}, {"limits": {"processes": cap}})
    assert policy.limits.processes == expected
    assert bool(notes) == narrowed


def test_compat_strict_wins():
    for step, ceiling in (("strict", "best-effort"), ("best-effort", "strict")):
        policy, _ = _meet({"compat": {"landlock": step}}, {"compat": {"landlock": ceiling}})
        assert policy.compat.landlock == "strict"


def test_builtin_ceiling_shape():
    c = ceilings.builtin()
    assert "{repo}" in c.fs.write and "{tmp}" in c.fs.write
    assert not c.net.unrestricted and not c.net.connect_tcp and not c.net.udp
    for forbidden in ("/root", "/var", "/tmp", "/home", "{home}"):
        assert forbidden not in (*c.fs.read, *c.fs.write, *c.fs.exec)
    assert {"/etc/shadow", "/etc/ssh", "/etc/sudoers"} <= set(c.fs.deny)
    assert c.limits.processes and c.limits.wall_seconds


def test_meet_never_widens_random_policies():
    """Property: whatever the step asks, every result path lies inside a ceiling path with the right."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    paths = st.sampled_from(["/", "/usr", "/usr/bin", "/etc", "/etc/ssh", "/root", ".", "sub", "{tmp}", "{home}",
                             "/tmp", "{tmp}/a"])
    fs = st.fixed_dictionaries({}, optional={k: st.lists(paths, max_size=4) for k in ("read", "exec", "write")})
    ceiling = _policy(CEILING_FS, "ceiling")

    def inside(path, roots):
        return any(r == "/" or path == r or path.startswith(r + "/") for r in roots)

    @settings(max_examples=200, deadline=None)
    @given(fs)
    def check(step_fs):
        policy, _ = meet(_policy({"fs": step_fs}, "step"), ceiling)
        c = ceiling.fs
        assert all(inside(p, c.write) for p in policy.fs.write)
        assert all(inside(p, c.exec) for p in policy.fs.exec)
        assert all(inside(p, (*c.read, *c.exec, *c.write)) for p in policy.fs.read)
        assert not any(inside(p, ["/etc/shadow"]) for p in (*policy.fs.read, *policy.fs.write))

    check()


def test_protections_only_add_up():
    """A step may protect more than the ceiling, never less (fs.protect is a union)."""
    ceiling = {"fs": {"read": ["."], "write": ["."], "protect": [".envrc"]}}
    policy, texts = _meet({"fs": {"write": ["."], "protect": ["Makefile"]}}, ceiling)
    assert policy.fs.protect == (f"{REPO}/.envrc", f"{REPO}/Makefile") and texts == []
    policy, _ = _meet({"fs": {"write": ["."]}}, ceiling)  # a step that names none keeps the ceiling's
    assert policy.fs.protect == (f"{REPO}/.envrc",)


def test_step_cannot_turn_off_the_ceilings_protect_defaults():
    ceiling = {"fs": {"read": ["."], "write": ["."]}}  # protect_defaults on by default
    policy, texts = _meet({"fs": {"write": ["."], "protect_defaults": False}}, ceiling)
    assert policy.fs.protect_defaults is True
    assert any("protect_defaults" in t for t in texts)
    # a ceiling that turned them off lets a step turn them back on, not the reverse
    off = {"fs": {"read": ["."], "write": ["."], "protect_defaults": False}}
    assert _meet({"fs": {"write": ["."]}}, off)[0].fs.protect_defaults is True
    assert _meet({"fs": {"write": ["."], "protect_defaults": False}}, off)[0].fs.protect_defaults is False


def test_write_on_a_protected_path_is_reported():
    ceiling = {"fs": {"read": ["."], "write": ["."], "protect": ["conf"]}}
    policy, texts = _meet({"fs": {"write": ["conf/app.ini"]}}, ceiling)
    assert any("protects" in t and "conf" in t for t in texts)
    assert f"{REPO}/conf" in policy.fs.protect  # the cage keeps it read-only


def test_builtin_ceiling_keeps_protect_defaults():
    assert ceilings.builtin().fs.protect_defaults is True
