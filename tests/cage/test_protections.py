"""The protection table and its compilers, for every Landlock ABI 1-7, without a kernel.

Nothing here creates a ruleset or installs a filter: the compilers decide in the parent, so what
each ABI gives (and what degrades) can be checked on any machine. Expected values are written
from the kernel's documentation (Documentation/userspace-api/landlock.rst), not from the module.
"""

import os

import pytest

from sandboy.confine import landlock, protections
from sandboy.errors import CageError, PolicyError
from sandboy.policy.model import Policy
from sandboy.policy.resolve import Context, resolve

# Landlock ABI -> filesystem rights handled (kernel docs: ABI 1 = bits 0-12, 2 adds REFER
# (bit 13), 3 adds TRUNCATE (14), 4 adds only network rights, 5 adds IOCTL_DEV (15), 6 and 7
# add scopes and audit flags, no filesystem right).
FS_HANDLED = {1: 0x1FFF, 2: 0x3FFF, 3: 0x7FFF, 4: 0x7FFF, 5: 0xFFFF, 6: 0xFFFF, 7: 0xFFFF}
FS_DEGRADED = {1: ["refer", "truncate", "ioctl_dev"], 2: ["truncate", "ioctl_dev"], 3: ["ioctl_dev"],
               4: ["ioctl_dev"], 5: [], 6: [], 7: []}
ABIS = range(1, 8)


@pytest.fixture
def job(tmp_path, monkeypatch):
    """job(abi, **sections): a compile job for a policy over tmp_path at Landlock ABI `abi`."""
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "work").mkdir()

    def make(abi, environ=None, **sections):
        policy = Policy.from_mapping({"version": 1, **sections}, str(tmp_path / "p.toml"))
        ctx = Context(cwd=str(tmp_path / "work"))
        return protections.Job(policy, resolve(policy, ctx), ctx, abi, environ)

    return make


def test_min_abi_of_each_landlock_protection_is_the_kernels():
    floors = {p.name: p.min_abi for p in protections.PROTECTIONS}
    assert floors["landlock.fs"] == 1
    assert floors["landlock.fs.refer"] == 2
    assert floors["landlock.fs.truncate"] == 3
    assert floors["landlock.net.tcp"] == 4
    assert floors["landlock.fs.ioctl_dev"] == 5
    assert floors["landlock.scopes"] == 6
    # every protection the compilers report on has exactly one row
    assert len(floors) == len(protections.PROTECTIONS)


@pytest.mark.parametrize("abi", [0, *ABIS, 8])
def test_fs_rights_handled_per_abi(abi):
    expected = 0 if abi == 0 else FS_HANDLED.get(abi, 0xFFFF)
    assert protections.fs_rights_for(abi) == expected


@pytest.mark.parametrize("abi", ABIS)
def test_fs_compiler_degrades_exactly_what_the_abi_lacks(job, abi):
    compiled = protections.compile_landlock_fs(job(abi, fs={"read": ["."]}))
    lacking = [d.split(":")[1].split()[0] for d in compiled.degraded]
    assert lacking == FS_DEGRADED[abi]
    assert compiled.outputs["handled_fs"] == FS_HANDLED[abi]
    # the report names only rights this ABI handles
    rules = dict(compiled.enforced["fs_rules"])
    device_rights = set(rules["/dev/null"])  # granted read, write and truncate by every cage
    assert ("truncate" in device_rights) == (abi >= 3)


@pytest.mark.parametrize("abi", ABIS)
def test_tcp_port_rules_need_abi_4(job, abi):
    compiled = protections.compile_landlock_net(job(abi, net={"connect_tcp": [443], "bind_tcp": [8080]}))
    if abi >= 4:
        assert compiled.degraded == []
        assert compiled.outputs["handled_net"] == 0b11
        assert compiled.enforced["tcp_connect"] == [443] and compiled.enforced["tcp_bind"] == [8080]
    else:
        assert len(compiled.degraded) == 1 and "ABI 4" in compiled.degraded[0]
        assert compiled.outputs["handled_net"] == 0
        assert compiled.outputs["connect_ports"] == () and compiled.enforced["tcp_connect"] == "any"


@pytest.mark.parametrize("abi", ABIS)
def test_no_network_asked_degrades_nothing_at_any_abi(job, abi):
    """Without port rules nothing is lost: seccomp refuses inet sockets altogether."""
    net = protections.compile_landlock_net(job(abi))
    sec = protections.compile_seccomp(job(abi))
    assert net.degraded == [] and sec.degraded == []
    assert sec.enforced["sockets"]["inet"] is False


@pytest.mark.parametrize("abi", ABIS)
def test_unrestricted_network_handles_no_port_at_any_abi(job, abi):
    compiled = protections.compile_landlock_net(job(abi, net={"unrestricted": True}))
    assert compiled.outputs["handled_net"] == 0 and compiled.degraded == []
    assert compiled.enforced["tcp_connect"] == "any"


@pytest.mark.parametrize("abi", ABIS)
def test_scopes_need_abi_6(job, abi):
    compiled = protections.compile_landlock_net(job(abi))
    if abi >= 6:
        assert compiled.enforced["scopes"] == ["abstract_unix_socket", "signal"]
        assert compiled.warnings == []
    else:
        assert compiled.enforced["scopes"] == [] and compiled.outputs["scoped"] == 0
        assert any("ABI 6" in w for w in compiled.warnings)


@pytest.mark.parametrize("abi", ABIS)
def test_listen_refused_where_landlock_checks_ports_and_no_listener_is_legitimate(job, abi):
    connect_only = protections.compile_seccomp(job(abi, net={"connect_tcp": [443]}))
    assert ("listen" in connect_only.enforced["denied_syscalls"]) == (abi >= 4)
    with_bind = protections.compile_seccomp(job(abi, net={"connect_tcp": [443], "bind_tcp": [8080]}))
    assert "listen" not in with_bind.enforced["denied_syscalls"]
    assert bool(with_bind.degraded) == (abi >= 4)  # autobind is unchecked only where ports are


@pytest.mark.parametrize("abi", ABIS)
def test_strict_refuses_at_every_abi_that_degrades(job, abi):
    asked = {"fs": {"read": ["."]}, "net": {"connect_tcp": [443]}, "compat": {"landlock": "strict"}}
    if abi >= 5:
        compiled = protections.compile_all(job(abi, **asked))
        assert all(not part.degraded for part in compiled.values())
    else:
        with pytest.raises(CageError, match="strict"):
            protections.compile_all(job(abi, **asked))


def test_strict_refuses_a_missing_path_naming_the_key(job):
    with pytest.raises(PolicyError, match=r"fs\.read"):
        protections.compile_landlock_fs(job(7, fs={"read": ["missing"]}, compat={"landlock": "strict"}))
    best_effort = protections.compile_landlock_fs(job(7, fs={"read": ["missing"]}))
    assert any("does not exist" in w for w in best_effort.warnings)


def test_compile_all_runs_every_compiler_in_plan_order(job):
    compiled = protections.compile_all(job(7))
    assert list(compiled) == ["namespaces", "hygiene", "landlock.fs", "landlock.net", "seccomp", "environment"]
    assert compiled["seccomp"].steps[-1][0] == "seccomp"
    assert compiled["hygiene"].steps[-1][0] == "no_new_privs"


def test_hygiene_drops_capabilities_only_when_held(job):
    held = protections.compile_hygiene(job(7, limits={"processes": 5}), drop_caps=True)
    labels = [label for label, _ in held.steps]
    assert "capset" in labels and labels[-1] == "no_new_privs" and "limits.processes" in labels
    assert held.enforced["capabilities"] == "dropped" and held.enforced["limits"] == {"processes": 5}
    none = protections.compile_hygiene(job(7), drop_caps=False)
    assert "capset" not in [label for label, _ in none.steps]
    assert none.enforced["capabilities"] == "none held"


def test_environment_passes_named_variables_sets_values_and_tmpdir(job):
    compiled = protections.compile_environment(job(7, environ={"PATH": "/bin", "SECRET": "x"},
                                                    env={"pass": ["PATH"], "set": {"A": "1"}}))
    assert compiled.outputs["env"] == {"PATH": "/bin", "A": "1"}
    assert compiled.enforced == {"env": ["A", "PATH"]}


# --- plan_rules / expand_denies: pure functions of the tree ------------------------------


def _rights(rules):
    return dict(rules)


def _count_is_within(monkeypatch) -> list:
    """[how many times paths.is_within was called], counted from now on: the cost checks below
    count the comparisons the Landlock split makes, not wall time. Patched in `sandboy.paths`, where
    `is_within_any` (the split's only caller) looks it up: patched in `policy.resolve` (which
    re-exports it) nothing was counted, and both checks passed with 0 whatever the split cost."""
    from sandboy import paths

    calls = [0]
    real_is_within = paths.is_within

    def counted(path, root):
        calls[0] += 1
        return real_is_within(path, root)

    monkeypatch.setattr(paths, "is_within", counted)
    return calls


def test_deny_inside_a_grant_splits_only_the_directories_on_the_way(tmp_path):
    (tmp_path / "a" / "secret").mkdir(parents=True)
    (tmp_path / "a" / "ok").mkdir()
    (tmp_path / "a" / "file").write_text("x")
    (tmp_path / "b").mkdir()
    root, warnings, split = str(tmp_path), [], []
    rules = _rights(landlock.plan_rules({root: landlock.WRITE}, [f"{root}/a/secret"], warnings.append, split))
    assert split == [root, f"{root}/a"]
    assert rules[root] == landlock.READ_DIR and rules[f"{root}/a"] == landlock.READ_DIR
    assert rules[f"{root}/b"] == landlock.WRITE and rules[f"{root}/a/ok"] == landlock.WRITE
    assert rules[f"{root}/a/file"] == landlock.WRITE & landlock.FILE_RIGHTS  # no directory rights on a file
    assert f"{root}/a/secret" not in rules and warnings == []


def test_grant_inside_a_deny_is_dropped_with_a_warning(tmp_path):
    (tmp_path / "d" / "inner").mkdir(parents=True)
    warnings = []
    rules = landlock.plan_rules({f"{tmp_path}/d/inner": landlock.READ}, [f"{tmp_path}/d"], warnings.append)
    assert rules == [] and "inside a denied path" in warnings[0]


def test_split_never_grants_a_symlink(tmp_path):
    (tmp_path / "secret").write_text("x")
    os.symlink("/", tmp_path / "evil")
    rules = _rights(landlock.plan_rules({str(tmp_path): landlock.WRITE}, [f"{tmp_path}/secret"], print))
    assert f"{tmp_path}/evil" not in rules and rules[str(tmp_path)] == landlock.READ_DIR


def test_component_prefix_is_not_inside(tmp_path):
    """/x/ab is not under a deny of /x/a (whole components)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "ab").mkdir()
    rules = _rights(landlock.plan_rules({f"{tmp_path}/ab": landlock.READ}, [f"{tmp_path}/a"], print))
    assert rules == {f"{tmp_path}/ab": landlock.READ}


def test_a_split_directory_checks_each_entry_only_against_the_cut_points_beneath_it(tmp_path, monkeypatch):
    """A repository's directory of many files and a step policy denying a few hundred of them:
    every entry was checked against every deny and protected path (39 s for 30,000 entries and
    300 denies before the step ran). Counted, not timed: the work grows with entries + cut points."""

    big = tmp_path / "big"
    big.mkdir()
    for i in range(3000):
        (big / f"f{i}").write_text("")
    (big / "sub").mkdir()
    (big / "sub" / "keep").write_text("")
    (big / "sub" / "ro").write_text("")
    denies = [f"{big}/f{i}" for i in range(0, 3000, 10)]  # 300
    protects = [f"{big}/f{i}" for i in range(1, 3000, 10)] + [f"{big}/sub/ro"]  # 301
    calls = _count_is_within(monkeypatch)
    warnings = []
    rules = _rights(landlock.plan_rules({str(tmp_path): landlock.WRITE}, denies, warnings.append, None, protects))
    assert 0 < calls[0] < 10 * (3000 + len(denies) + len(protects)), calls[0]  # the old check: 1.6 million
    # the same rules as ever: denied entries absent, protected ones read-only, the rest as granted
    assert warnings == [] and rules[str(tmp_path)] == rules[str(big)] == landlock.READ_DIR
    for i in range(3000):
        got = rules.get(f"{big}/f{i}")
        assert got == (None if i % 10 == 0 else landlock.WRITE & landlock.READ_ONLY & landlock.FILE_RIGHTS
                       if i % 10 == 1 else landlock.WRITE & landlock.FILE_RIGHTS), (i, got)
    assert rules[f"{big}/sub"] == landlock.READ_DIR
    assert rules[f"{big}/sub/keep"] == landlock.WRITE & landlock.FILE_RIGHTS
    assert rules[f"{big}/sub/ro"] == landlock.WRITE & landlock.READ_ONLY & landlock.FILE_RIGHTS


def test_many_grants_and_many_denies_are_matched_by_their_parents_not_each_against_each(tmp_path, monkeypatch):
    """A step policy's thousands of grants and thousands of denies (a 1 MiB file holds 15,000 of
    each): each grant was checked against every deny (and every protected path) — 95 s for
    15,000 of each before the step ran. Counted, not timed; the rules are the same as ever."""

    for i in range(4000):
        (tmp_path / f"f{i}").write_text("")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "in").write_text("")
    grants = {f"{tmp_path}/f{i}": landlock.READ for i in range(2000)}
    grants[f"{tmp_path}/d/in"] = landlock.READ  # inside a denied directory: dropped, with a warning
    grants[f"{tmp_path}/"] = landlock.READ_DIR  # not written normally: checked against every deny, as ever
    denies = [f"{tmp_path}/f{i}" for i in range(2000, 4000)] + [f"{tmp_path}/d"]
    protects = [f"{tmp_path}/f{i}" for i in range(0, 2000, 2)]
    calls = _count_is_within(monkeypatch)
    warnings = []
    rules = _rights(landlock.plan_rules(grants, denies, warnings.append, None, protects))
    assert 0 < calls[0] < 20 * (len(grants) + len(denies) + len(protects)), calls[0]  # the old check: 12 million
    assert warnings == [f"fs: {tmp_path}/d/in lies inside a denied path; not granted"]
    for i in range(2000):
        assert rules[f"{tmp_path}/f{i}"] == landlock.READ & landlock.FILE_RIGHTS & (
            landlock.READ_ONLY if i % 2 == 0 else ~0), i
    assert rules[f"{tmp_path}/"] == landlock.READ_DIR and f"{tmp_path}/f2000" not in rules


@pytest.mark.parametrize("odd", ["", "/", "//", "/usr/", "/usr//"])
def test_a_deny_not_written_normally_still_covers_what_is_within_it(odd):
    """plan_rules finds each grant's denies by its parent directories (_near); a deny no parent
    is equal to ("" — `is_within` holds every absolute path within it —, "/", "/usr/") must
    still drop the grants within it, as is_within_any over every deny did."""
    from sandboy.policy.resolve import is_within_any

    grants = {"/usr/lib": landlock.READ, "/usr": landlock.READ}
    warnings = []
    rules = dict(landlock.plan_rules(grants, [odd], warnings.append))
    for path in grants:
        assert (path in rules) == (not is_within_any(path, [odd])), (odd, path, rules)


def test_expand_denies_matches_globs_now_and_skips_what_is_missing(tmp_path):
    (tmp_path / "x" / "y").mkdir(parents=True)
    (tmp_path / "x" / "y" / "k.pem").write_text("k")
    (tmp_path / "top.pem").write_text("k")
    os.symlink(".", tmp_path / "x" / "loop")  # `**` must not walk into it (it would never end)
    out = landlock.expand_denies([f"{tmp_path}/**/*.pem", f"{tmp_path}/missing", f"{tmp_path}/x/loop"], print)
    assert sorted(out) == [f"{tmp_path}/top.pem", f"{tmp_path}/x", f"{tmp_path}/x/y/k.pem"]


def test_a_rule_its_ancestors_rights_already_give_is_dropped_and_no_other():
    """`landlock.drop_subsumed` (session 14): Landlock grants an access where any rule on the way
    up has it, so a rule whose rights its ancestors' rules hold together changes nothing there —
    and dropping a rule can only narrow what is reachable (another path to its inode gets less).
    Kept: a rule with a right no ancestor has (EXECUTE below a read grant), a split directory's
    entries (their parent holds READ_DIR only), and everything under /dev and /proc (the tier
    mounts new file systems there, under which the host directory's rule does not reach)."""
    READ, EXEC, RD = landlock.READ, landlock.EXEC, landlock.READ_DIR
    rules = [("/a", READ), ("/a/b", READ), ("/a/b/bin", EXEC), ("/a/b/bin/tool", landlock.EXECUTE), ("/a/f", landlock.READ_FILE),
             ("/dev", READ), ("/dev/zero", landlock.READ_FILE), ("/proc", READ), ("/proc/self", READ),
             ("/s", RD), ("/s/x", READ), ("/s/x/deeper", READ), ("/t", landlock.WRITE), ("/t/.venv", READ)]
    assert landlock.drop_subsumed(rules) == [
        ("/a", READ), ("/a/b/bin", EXEC), ("/dev", READ), ("/dev/zero", landlock.READ_FILE), ("/proc", READ),
        ("/proc/self", READ), ("/s", RD), ("/s/x", READ), ("/t", landlock.WRITE)]


@pytest.mark.needs_kernel
def test_a_dropped_rule_leaves_its_paths_as_reachable_as_before(tmp_path):
    """The kernel's twin: `read = [D, D/sub]` compiles to D's rule alone, and the command still
    reads D/sub's file and lists D/sub; a file outside D stays refused."""
    from sandboy import Policy as ApiPolicy, run

    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "sub" / "f").write_text("SUB\n")
    (tmp_path / "outside").write_text("OUT\n")
    d = str(tmp_path / "d")
    policy = ApiPolicy.from_mapping({"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/etc", d, f"{d}/sub"],
                                                           "exec": ["/usr/bin", "/bin"]}})
    job = protections.Job(policy, resolve(policy, Context(cwd=str(tmp_path))), Context(cwd=str(tmp_path)),
                          landlock.abi_version(), os.environ)
    rules = _rights(protections.compile_landlock_fs(job, cache=str(tmp_path / "cache")).outputs["rules"])
    assert d in rules and f"{d}/sub" not in rules
    out = tmp_path / "out"
    with open(out, "w") as fh:
        result = run(["/bin/sh", "-c", f"cat {d}/sub/f; ls {d}/sub; cat {tmp_path}/outside || echo refused"], policy,
                     cwd=str(tmp_path), stdout=fh.fileno(), timeout=30)
    assert result.returncode == 0 and out.read_text() == "SUB\nf\nrefused\n"
