"""The post-run git check (confine/gitcheck.py, ADR 0019), called directly: a snapshot, then
what a hostile command would do (run here on the host, by the real git and shell), then
`verify()` and `quarantine()`. Each attack is judged from the host side afterwards — the
operator's own `git status` / `git commit` runs nothing planted — and each has a legitimate
twin that must not be flagged. The same attacks through a real cage: test_redteam_tier.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from userkit import as_user

from sandboy.confine import gitcheck
from sandboy.confine.gitcheck import ConfigSyntaxError, is_safe, parse_config

from gitkit import git_repo, scratch_env, sh


@pytest.fixture
def env(tmp_path):
    return scratch_env(tmp_path / "home")


def check(root, script, env, home=None):
    """Snapshot `root`, run the attacker's (or the twin's) script in it, verify. The set-up is
    a clock tick older than the snapshot: a file changed within the same tick before it counts
    as the run's (fail closed, ADR 0019), which a test making files just before would meet."""
    import time

    time.sleep(0.02)
    snap = gitcheck.snapshot([str(root)], home=str(home) if home else env["HOME"])
    assert snap is not None
    sh(script, root, env)
    return snap, snap.verify()


def fsmonitor(marker) -> str:
    return f'[core]\\n\\tfsmonitor = "touch {marker}; false"\\n'


def host_git_status(repo, env, *where):
    subprocess.run(["git", "-c", "safe.directory=*", "-C", os.path.join(str(repo), *where), "status"],
                   capture_output=True, env=env, timeout=30)


# --- the attacks --------------------------------------------------------------------------------

ATTACKS = {
    # .git/commondir does not exist at launch: git reads config and hooks where it points
    "commondir": "mkdir evil && cp -r .git/objects .git/refs .git/HEAD evil/ && printf 'FSM' > evil/config "
                 "&& echo ../evil > .git/commondir",
    # a nested repository registered as a gitlink: git status at the top runs git status in it
    "gitlink": "git init -q sub && git -C sub commit -q --allow-empty -m s && printf 'FSM' >> sub/.git/config "
               "&& git update-index --add --cacheinfo 160000,$(git -C sub rev-parse HEAD),sub",
    # a repository below the top, not linked: the operator's git run in that directory
    "nested": "mkdir -p src/deep && git init -q src/deep && printf 'FSM' >> src/deep/.git/config",
    # a git file leading to a git directory the command made
    "gitfile": "mkdir -p sub && git init -q t && mv t/.git evil.git && printf 'FSM' >> evil.git/config "
               "&& echo 'gitdir: ../evil.git' > sub/.git",
    # a .git symlink to such a git file (git reads it as one)
    "linked gitfile": "mkdir -p sub && git init -q t && mv t/.git evil.git && printf 'FSM' >> evil.git/config "
                      "&& echo 'gitdir: ../evil.git' > gf && ln -s ../gf sub/.git",
    # config.worktree is read once extensions.worktreeConfig is on (where the config was not protected)
    "config.worktree": "git config extensions.worktreeConfig true && printf 'FSM' > .git/config.worktree",
    # the repository's own config, where no mount protected it (the tier unavailable)
    "config": "printf 'FSM' >> .git/config",
}


WHERE = {"nested": ("src", "deep"), "gitfile": ("sub",), "linked gitfile": ("sub",)}


@pytest.mark.parametrize("attack", ATTACKS)
def test_each_attack_is_real_without_the_check(tmp_path, env, attack):
    """The attacks below are not vacuous: left in place, the host's git runs the planted command."""
    repo = git_repo(tmp_path / "repo", env)
    marker = tmp_path / "PWNED"
    script = ATTACKS[attack].replace("FSM", fsmonitor(marker))
    sh(script, repo, env)
    host_git_status(repo, env, *WHERE.get(attack, ()))
    assert marker.exists(), f"{attack}: the attack does not work even unchecked"


@pytest.mark.parametrize("attack", ATTACKS)
def test_a_planted_config_is_found_and_moved_out_of_gits_way(tmp_path, env, attack):
    repo = git_repo(tmp_path / "repo", env)
    marker = tmp_path / "PWNED"
    snap, findings = check(repo, ATTACKS[attack].replace("FSM", fsmonitor(marker)), env)
    assert findings, f"{attack}: nothing found"
    moved, failed = gitcheck.quarantine(findings, snap.roots)
    assert moved and not failed, (moved, failed)
    where = WHERE.get(attack, ())
    host_git_status(repo, env, *where)
    host_git_status(repo, env)
    assert not marker.exists(), f"{attack}: the host's git ran the planted command after the quarantine"
    # nothing lost: what was moved is kept, with a manifest naming where it came from
    box = os.path.dirname(moved[0][1])
    assert os.path.dirname(box) == os.path.join(str(repo), gitcheck.QUARANTINE_DIR)
    manifest = open(os.path.join(box, "MANIFEST")).read()
    for original, now in moved:
        assert original in manifest and os.path.lexists(now)
    # the repository still works for the operator
    out = subprocess.run(["git", "-C", str(repo), "log", "--format=%s"], capture_output=True, text=True, env=env)
    assert out.stdout.split() == ["init"], out


def test_the_repositorys_own_config_gets_its_launch_content_back(tmp_path, env):
    repo = git_repo(tmp_path / "repo", env)
    sh("git remote add origin https://example.org/x.git", repo, env)
    before = (repo / ".git" / "config").read_bytes()
    snap, findings = check(repo, "git config user.name x && printf '[core]\\n\\tpager = evil\\n' >> .git/config", env)
    assert [f.path for f in findings] == [f"{repo}/.git/config"]
    assert "core.pager" in findings[0].why and "user.name" not in findings[0].why
    gitcheck.quarantine(findings, snap.roots)
    assert (repo / ".git" / "config").read_bytes() == before


def test_planted_hooks_are_found_wherever_git_runs_them(tmp_path, env):
    """.git/hooks, a core.hooksPath directory that did not exist at launch, a submodule's
    hooks under .git/modules; sample hooks are not hooks, but a non-executable file is judged
    too (a hook sources its neighbours whatever their mode: husky's `_/h`)."""
    repo = git_repo(tmp_path / "repo", env)
    lib = git_repo(tmp_path / "lib", env)
    sh(f"git -c protocol.file.allow=always submodule add -q '{lib}' sub && git commit -qm sub", repo, env)
    marker = tmp_path / "PWNED"
    hook = f"#!/bin/sh\\ntouch {marker}\\n"
    script = (f"printf '{hook}' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && "
              f"printf '{hook}' > .git/modules/sub/hooks/post-checkout && chmod +x .git/modules/sub/hooks/post-checkout && "
              "echo 'not executable' > .git/hooks/post-commit && touch .git/hooks/pre-push.sample")
    snap, findings = check(repo, script, env)
    assert sorted(f.path for f in findings) == sorted([f"{repo}/.git/hooks/pre-commit", f"{repo}/.git/hooks/post-commit",
                                                      f"{repo}/.git/modules/sub/hooks/post-checkout"])
    gitcheck.quarantine(findings, snap.roots)
    sh("echo x > f && git add f && git commit -qm two", repo, env)
    assert not marker.exists()


def test_a_hooks_path_made_during_the_run_is_checked(tmp_path, env):
    """The operator's global config names a relative core.hooksPath (husky's `.husky/_`) that
    does not exist in this repository at launch: a mount cannot protect it, the check can."""
    repo = git_repo(tmp_path / "repo", env)
    with open(os.path.join(env["HOME"], ".gitconfig"), "w") as fh:
        fh.write("[core]\n\thooksPath = .husky/_\n")
    marker = tmp_path / "PWNED"
    snap, findings = check(repo, f"mkdir -p .husky/_ && printf '#!/bin/sh\\ntouch {marker}\\n' > .husky/_/pre-commit "
                                 "&& chmod +x .husky/_/pre-commit", env)
    assert [f.path for f in findings] == [f"{repo}/.husky/_/pre-commit"]
    gitcheck.quarantine(findings, snap.roots)
    sh("git commit -q --allow-empty -m two", repo, env)
    assert not marker.exists()


def test_includes_of_includes_are_followed(tmp_path, env):
    """.git/config includes tools/a.cfg (protected at launch), which includes tools/b.cfg —
    absent at launch, so nothing bound it; the run made it."""
    repo = git_repo(tmp_path / "repo", env)
    (repo / "tools").mkdir()
    (repo / "tools" / "a.cfg").write_text("[include]\n\tpath = b.cfg\n")
    sh("git config include.path ../tools/a.cfg", repo, env)
    marker = tmp_path / "PWNED"
    snap, findings = check(repo, f"printf '{fsmonitor(marker)}' > tools/b.cfg", env)
    assert [f.path for f in findings] == [f"{repo}/tools/b.cfg"], findings
    gitcheck.quarantine(findings, snap.roots)
    host_git_status(repo, env)
    assert not marker.exists()


def test_a_worktree_admin_dir_may_not_lead_elsewhere(tmp_path, env):
    repo = git_repo(tmp_path / "repo", env)
    sh("git worktree add -q wt", repo, env)
    snap, findings = check(repo, "mkdir evil && echo ../../../evil > .git/worktrees/wt/commondir", env)
    assert [f.path for f in findings] == [f"{repo}/.git/worktrees/wt/commondir"]


def test_a_write_root_below_the_top_of_a_repository_is_checked(tmp_path, env):
    """The write root is `repo/build`, the repository's .git is above it (not writable): a
    repository planted inside the write root is still found."""
    repo = git_repo(tmp_path / "repo", env)
    (repo / "build").mkdir()
    snap = gitcheck.snapshot([str(repo / "build")], home=env["HOME"])
    assert snap is not None and snap.roots == [str(repo / "build")]
    sh("git init -q x && printf '[alias]\\n\\tst = !evil\\n' >> x/.git/config", repo / "build", env)
    assert [f.path for f in snap.verify()] == [f"{repo}/build/x/.git/config"]


# --- the twins: legitimate git work is not flagged ---------------------------------------------------

TWINS = {
    "commit": "echo x > f && git add f && git commit -qm two && git checkout -qb topic && git tag v1",
    "submodule add": "git -c protocol.file.allow=always submodule add -q LIB sub && git commit -qm sub",
    "worktree add": "git worktree add -q wt && git -C wt commit -q --allow-empty -m in-wt",
    "clone": "git clone -q LIB cloned && git -C cloned config user.name me && git -C cloned remote add up LIB "
             "&& git -C cloned fetch -q up && git -C cloned branch -q --set-upstream-to=up/master master || true",
    "init nested": "git init -q vendor/thing && git -C vendor/thing commit -q --allow-empty -m v",
    "config": "git config user.name someone && git config branch.master.description hello",
}


@pytest.mark.parametrize("twin", TWINS)
def test_legitimate_git_work_is_not_flagged(tmp_path, env, twin):
    repo = git_repo(tmp_path / "repo", env)
    lib = git_repo(tmp_path / "lib", env)
    snap, findings = check(repo, TWINS[twin].replace("LIB", str(lib)), env)
    assert findings == [], findings


def test_what_was_there_at_launch_is_not_flagged(tmp_path, env):
    """A nested repository with the operator's own fsmonitor and hooks, untouched by the run."""
    repo = git_repo(tmp_path / "repo", env)
    nested = git_repo(repo / "nested", env)
    sh("git config core.fsmonitor true && printf '#!/bin/sh\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
       nested, env)
    sh("git config credential.helper store", repo, env)
    snap, findings = check(repo, "echo x > nested/f && git -C nested add f && git config user.email a@b", env)
    assert findings == [], findings


def test_every_write_root_is_walked_but_tmp_and_nested_ones(tmp_path):
    """Whether a write root holds a repository at launch does not decide (the command may
    `git init` one): every directory is walked once — not the run's {tmp}, not a root inside
    another, not a path that is no directory. Nothing left to walk: no snapshot."""
    for name in ("plain", "plain/inner", "tmp"):
        (tmp_path / name).mkdir()
    (tmp_path / "file").write_text("")
    roots = [str(tmp_path / n) for n in ("plain", "plain/inner", "missing", "file", "tmp")]
    snap = gitcheck.snapshot(roots, exclude=[str(tmp_path / "tmp")])
    assert snap is not None and snap.roots == [str(tmp_path / "plain")]
    assert gitcheck.snapshot([str(tmp_path / "missing"), str(tmp_path / "tmp")], exclude=[str(tmp_path / "tmp")],
                             home=str(tmp_path / "home")) is None


def test_a_symlinked_quarantine_dir_is_not_followed(tmp_path, env):
    repo = git_repo(tmp_path / "repo", env)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    snap, findings = check(repo, f"echo ../x > .git/commondir && ln -s '{elsewhere}' {gitcheck.QUARANTINE_DIR}", env)
    moved, failed = gitcheck.quarantine(findings, snap.roots)
    assert moved == [] and failed and os.listdir(elsewhere) == []
    message = gitcheck.after_run(snap)
    assert "NOT moved" in message and "commondir" in message


def test_a_walk_over_budget_fails_closed(tmp_path, env):
    repo = git_repo(tmp_path / "repo", env)
    snap, _ = check(repo, "mkdir -p a b c && touch a/1 a/2 b/1 c/1", env)
    findings = snap.verify(budget=3)
    assert findings and findings[-1].path is None and "not checked to the end" in findings[-1].why


# --- the config reader: what git sees, no more and no less --------------------------------------------

def test_the_config_reader_sees_what_git_sees(tmp_path):
    cases = {
        "[core]\n\tfsmonitor = x\n": [("core.fsmonitor", "x")],
        "[Core] FSMonitor=x": [("core.fsmonitor", "x")],
        '[remote "Origin"]\n\turl = "a b" ; c\n': [("remote.Origin.url", "a b")],
        "[section.Sub]\nkey\n": [("section.sub.key", None)],
        # a key "hidden" in a continued value is part of the value, as git reads it
        '[alias]\n\tx = "one \\\n[core] fsmonitor = two"\n': [("alias.x", "one [core] fsmonitor = two")],
        # and a continuation outside quotes
        "[alias]\n\tx = a\\\nb\n[core]\n\tpager = p\n": [("alias.x", "ab"), ("core.pager", "p")],
        '[includeIf "gitdir:~/x/"]\n\tpath = ../a\n': [("includeif.gitdir:~/x/.path", "../a")],
        "# c\n; c\n[a]\n\tb = 1 # c\n\tc = \"#x\"\n": [("a.b", "1"), ("a.c", "#x")],
        "[core]\r\n\tfsmonitor = x\r\n": [("core.fsmonitor", "x")],
        "key = outside\n": [("key", "outside")],  # git takes it too (a name no setting has)
    }
    for text, expected in cases.items():
        assert parse_config(text) == expected, text
        # the reference: git's own reader agrees
        path = tmp_path / "c"
        path.write_text(text, newline="")
        out = subprocess.run(["git", "config", "--file", str(path), "--list", "-z"], capture_output=True)
        assert out.returncode == 0, (text, out.stderr)
        listed = [tuple(item.split("\n", 1)) if "\n" in item else (item, None)
                  for item in out.stdout.decode().split("\0") if item]
        assert [(n.lower(), v) for n, v in listed] == [(n.lower(), v) for n, v in expected], text
    for bad in ('[core]\n\tx = "unterminated\n', "[core\n", "[core]\n\t9x = 1\n"):
        with pytest.raises(ConfigSyntaxError):
            parse_config(bad)
        (tmp_path / "bad").write_text(bad)
        assert subprocess.run(["git", "config", "--file", str(tmp_path / "bad"), "--list"],
                              capture_output=True).returncode != 0, bad


def test_which_keys_are_safe():
    assert is_safe("core.repositoryformatversion", "0")
    assert is_safe("remote.origin.url", "https://example.org/x")
    assert is_safe("submodule.sub.update", "rebase")
    assert is_safe("color.diff.meta", "blue")
    for name, value in [("core.fsmonitor", "x"), ("core.hookspath", "h"), ("core.sshcommand", "x"),
                        ("core.pager", "x"), ("alias.st", "!x"), ("filter.a.smudge", "x"), ("diff.a.textconv", "x"),
                        ("credential.helper", "x"), ("include.path", "x"), ("includeif.gitdir:x.path", "y"),
                        ("remote.origin.url", "ext::sh -c evil"), ("submodule.sub.update", "!evil"),
                        ("uploadpack.packobjectshook", "x"), ("core.notakey", "x"), ("gpg.program", "x")]:
        assert not is_safe(name, value), name


def test_a_write_root_holding_repositories_is_checked(tmp_path, env):
    """`fs.write = ["~/src"]`: not a repository itself, but the repositories right below it are
    found at launch (one directory read), and the walk after the run covers them all."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "notes").mkdir()
    git_repo(src / "one", env)
    snap, findings = check(src, "printf '[core]\\n\\tfsmonitor = x\\n' >> one/.git/config", env)
    assert [f.path for f in findings] == [f"{src}/one/.git/config"]


def test_a_git_file_leading_into_another_write_root_is_followed(tmp_path, env):
    """Only `repo` holds a repository, but the command may also write `scratch`: a gitlinked
    `sub/.git` file leading to a git directory made there is judged all the same."""
    repo = git_repo(tmp_path / "repo", env)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    snap = gitcheck.snapshot([str(repo), str(scratch)], home=env["HOME"])
    assert snap.roots == [str(repo), str(scratch)]
    sh(f"git init -q --bare '{scratch}/evil.git' && printf '[core]\\n\\tfsmonitor = x\\n' >> '{scratch}/evil.git/config' "
       f"&& mkdir sub && echo 'gitdir: {scratch}/evil.git' > sub/.git", repo, env)
    findings = snap.verify()
    assert [f.path for f in findings] == [f"{scratch}/evil.git/config"]
    moved, failed = gitcheck.quarantine(findings, snap.writable)
    assert moved and moved[0][1].startswith(f"{scratch}/{gitcheck.QUARANTINE_DIR}/")


def test_an_include_from_a_repository_outside_the_write_roots_is_followed(tmp_path, env):
    """The write root is `repo/tools`; `.git/config` (not writable) includes `tools/b.cfg`,
    absent at launch: planted there, it is found."""
    repo = git_repo(tmp_path / "repo", env)
    (repo / "tools").mkdir()
    sh("git config include.path ../tools/b.cfg", repo, env)
    snap, findings = check(repo / "tools", "printf '[core]\\n\\tfsmonitor = x\\n' > b.cfg", env)
    assert [f.path for f in findings] == [f"{repo}/tools/b.cfg"]


def test_hostile_file_kinds_do_not_stall_or_fool_the_check(tmp_path, env):
    """A FIFO as commondir (an open would block the parent for ever), a config larger than the
    reader reads with the key at its end: each is a finding, found at once."""
    repo = git_repo(tmp_path / "repo", env)
    padding = "# " + "x" * 1000 + "\n"
    snap, findings = check(repo, "mkfifo .git/commondir && git init -q big && "
                                 f"python3 -c \"open('big/.git/config','a').write({padding!r} * 5000 + '[core]\\\\n\\\\tfsmonitor = x\\\\n')\"",
                           env)
    assert sorted(f.path for f in findings) == sorted([f"{repo}/.git/commondir", f"{repo}/big/.git/config"]), findings
    assert any("not read to the end" in f.why for f in findings)


@pytest.mark.parametrize("existed", [False, True])
def test_the_operators_global_config_in_a_write_root_is_checked(tmp_path, env, existed):
    """A home directory granted for writing (no repository in it): a `~/.gitconfig` the command
    makes (or changes) configures every repository of the operator's. Absent at launch, no
    mount can protect it; found after the run, and the launch content put back."""
    home = tmp_path / "home"
    if existed:
        (home / ".gitconfig").write_text("[user]\n\tname = op\n")
    snap = gitcheck.snapshot([str(home)], home=str(home))
    assert snap is not None and snap.roots == [str(home)]
    sh("git config --global core.fsmonitor 'touch PWNED' && git config --global user.email x@y", home, env)
    findings = snap.verify()
    assert [f.path for f in findings] == [f"{home}/.gitconfig"] and "core.fsmonitor" in findings[0].why
    gitcheck.quarantine(findings, snap.writable)
    if existed:
        assert (home / ".gitconfig").read_text() == "[user]\n\tname = op\n"
    else:
        assert not (home / ".gitconfig").exists()


def test_what_an_old_symlink_leads_to_is_judged(tmp_path, env):
    """A project links its hooks into .git/hooks (`pre-commit -> ../../scripts/pre-commit`) and
    its config from the worktree: the links are old (and protected under the tier), but what they
    lead to is in the write root. Changed during the run, it is found."""
    repo = git_repo(tmp_path / "repo", env)
    (repo / "scripts").mkdir()
    (repo / "scripts" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    os.chmod(repo / "scripts" / "pre-commit", 0o755)
    os.symlink("../../scripts/pre-commit", repo / ".git" / "hooks" / "pre-commit")
    (repo / "scripts" / "gitconfig").write_text("[user]\n\tname = op\n")
    sh("git config include.path ../scripts/gitconfig", repo, env)
    marker = tmp_path / "PWNED"
    snap, findings = check(repo, f"printf '#!/bin/sh\\ntouch {marker}\\n' > scripts/pre-commit && "
                                 "printf '[core]\\n\\tsshCommand = evil\\n' >> scripts/gitconfig", env)
    assert sorted(f.path for f in findings) == [f"{repo}/scripts/gitconfig", f"{repo}/scripts/pre-commit"], findings
    gitcheck.quarantine(findings, snap.writable)
    sh("git commit -q --allow-empty -m two", repo, env)
    assert not marker.exists()


def test_an_include_cycle_costs_one_look_each(tmp_path, env):
    repo = git_repo(tmp_path / "repo", env)
    snap = gitcheck.snapshot([str(repo)], home=env["HOME"])
    includes = "".join("[include]\n\tpath = loop.cfg\n" for _ in range(50))
    (repo / ".git" / "loop.cfg").write_text(includes + "[core]\n\tpager = x\n")
    with open(repo / ".git" / "config", "a") as fh:
        fh.write("[include]\n\tpath = loop.cfg\n")
    import time

    started = time.monotonic()
    findings = snap.verify()
    assert time.monotonic() - started < 5
    assert {f.path for f in findings} == {f"{repo}/.git/config", f"{repo}/.git/loop.cfg"}


def test_a_repository_hidden_in_the_quarantine_is_found(tmp_path, env):
    repo = git_repo(tmp_path / "repo", env)
    snap, findings = check(repo, f"mkdir -p {gitcheck.QUARANTINE_DIR}/x && git init -q {gitcheck.QUARANTINE_DIR}/x/r && "
                                 f"printf '[core]\\n\\tfsmonitor = x\\n' >> {gitcheck.QUARANTINE_DIR}/x/r/.git/config", env)
    assert [f.path for f in findings] == [f"{repo}/{gitcheck.QUARANTINE_DIR}/x/r/.git/config"]


def test_the_quarantine_never_follows_a_swapped_component(tmp_path):
    """The moves are made between directory fds opened with O_NOFOLLOW from the write root
    down: a component that became a symlink (a second run sharing the write root, between the
    check and the move) stops the move instead of leading it outside."""
    import errno

    root = tmp_path / "root"
    (root / "real").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(str(outside), root / "swapped")
    fd = gitcheck._open_below(str(root), ["real"])
    os.close(fd)
    with pytest.raises(OSError) as refused:
        gitcheck._open_below(str(root), ["swapped"])
    assert refused.value.errno in (errno.ELOOP, errno.ENOTDIR)
    box_fd, box = gitcheck._quarantine_box(str(root), "stamp")
    os.close(box_fd)
    box_fd, second = gitcheck._quarantine_box(str(root), "stamp")  # never reused
    os.close(box_fd)
    assert box != second and os.path.dirname(box) == os.path.dirname(second) == f"{root}/{gitcheck.QUARANTINE_DIR}"
    assert os.listdir(outside) == []


# --- a write root holding no repository at launch (ADR 0019, session 5) ---------------------------

PLAIN_ATTACKS = {
    # the write root itself becomes a repository: the operator's `git status` there runs it
    "init at the top": "git init -q . && printf 'FSM' >> .git/config",
    # a repository below it, two levels down (one level was found at launch before; two were not)
    "init below": "mkdir -p a/b && git init -q a/b/r && printf 'FSM' >> a/b/r/.git/config",
    # a bare layout (HEAD + objects/, no `.git`): git's discovery takes the directory itself
    "bare": "git init -q --bare x.git && git -C x.git config core.bare false && git -C x.git config core.worktree .. "
            "&& printf 'FSM' >> x.git/config",
    # a `.git` file leading to a git directory made beside it
    "git file": "git init -q t && mv t/.git .hidden && rmdir t && printf 'FSM' >> .hidden/config && mkdir w "
                "&& echo 'gitdir: ../.hidden' > w/.git",
    # a hook in a fresh repository, run by the operator's next commit there
    "hook": "git init -q r && printf '#!/bin/sh\\ntouch MARKER\\n' > r/.git/hooks/pre-commit && chmod +x r/.git/hooks/pre-commit",
}
PLAIN_WHERE = {"init at the top": ".", "init below": "a/b/r", "bare": "x.git", "git file": "w", "hook": "r"}


@pytest.mark.parametrize("attack", PLAIN_ATTACKS)
def test_a_repository_planted_in_a_write_root_without_one_is_found(tmp_path, env, attack):
    """Before session 5 a write root that was not, did not lie in and did not directly hold a
    repository at launch had no snapshot at all: each of these ran the planted command on the
    operator's next git command in that directory. Checked from the host side after the
    quarantine: the real git runs nothing; and that it would have without it."""
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("not a repository\n")
    marker = tmp_path / "PWNED"
    script = PLAIN_ATTACKS[attack].replace("FSM", fsmonitor(marker)).replace("MARKER", str(marker))
    snap, findings = check(plain, script, env)
    assert findings, f"{attack}: nothing found"
    moved, failed = gitcheck.quarantine(findings, snap.writable)
    assert moved and not failed, (moved, failed)
    where = str(plain / PLAIN_WHERE[attack])
    host_git_status(where, env)
    sh("git -c safe.directory=* commit -q --allow-empty -m x || true", where, env)
    assert not marker.exists(), f"{attack}: the host's git ran the planted command after the quarantine"
    # the probe is real: the same files put back where they were do run
    for original, now in moved:
        os.rename(now, original)
    host_git_status(where, env)
    sh("git -c safe.directory=* commit -q --allow-empty -m x || true", where, env)
    assert marker.exists(), f"{attack}: the planted files do not run even unchecked"


PLAIN_TWINS = {
    "init and commit": "git init -q . && echo x > f && git add f && git commit -qm one && git checkout -qb topic",
    "init below": "git init -q sub/r && git -C sub/r commit -q --allow-empty -m v && git -C sub/r config user.name me",
    "clone": "git clone -q LIB cloned && git -C cloned commit -q --allow-empty -m mine",
    "bare clone": "git clone -q --bare LIB mirror.git",
}


@pytest.mark.parametrize("twin", PLAIN_TWINS)
def test_git_work_in_a_write_root_without_a_repository_is_not_flagged(tmp_path, env, twin):
    plain = tmp_path / "plain"
    plain.mkdir()
    lib = git_repo(tmp_path / "lib", env)
    snap, findings = check(plain, PLAIN_TWINS[twin].replace("LIB", str(lib)), env)
    assert findings == [], findings


def test_an_unlistable_directory_of_another_user_left_as_it_was_is_not_a_finding():
    """A write root shared with other users (`/tmp`) holds their private directories. One the
    run did not touch (old ctime) and that is not ours is skipped; ours, or one the run made
    unlistable, fails closed as before (test_gitcheck_attacks.py). Run by uid 65534 (no
    CAP_DAC_READ_SEARCH)."""
    import pathlib
    import time

    sys.path.insert(0, str(pathlib.Path(__file__).parent.parent))
    import userkit

    userkit.skip_unless_nobody_can_run()
    src = pathlib.Path(gitcheck.__file__).resolve().parents[2]
    with userkit.world_readable_tmp("sandboy-gitcheck-") as base:
        shared = base / "shared"
        (shared / "theirs" / "sub").mkdir(parents=True)  # a subdirectory: not a leaf, the walk lists it
        os.chmod(shared, 0o777)
        os.chown(shared / "theirs", 12345, 12345)
        os.chmod(shared / "theirs", 0o700)
        time.sleep(0.02)
        code = ("import os, sys, time; from sandboy.confine import gitcheck\n"
                "snap = gitcheck.snapshot([sys.argv[1]], home='/nonexistent')\n"
                "time.sleep(0.02); os.makedirs(sys.argv[1] + '/mine/sub'); os.chmod(sys.argv[1] + '/mine', 0o311)\n"
                "print(sorted(str(f.why) for f in snap.verify()))")
        out = subprocess.run(as_user(["/usr/bin/python3", "-c", code, str(shared)]),
                             capture_output=True, text=True, timeout=60, cwd="/", env={"PYTHONPATH": str(src)})
        assert out.returncode == 0, out.stderr
        assert "theirs" not in out.stdout, out.stdout
        assert f"{shared}/mine: cannot be looked through" in out.stdout, out.stdout


# --- husky: hooks that run tracked scripts of the worktree (ADR 0019, session 5) -----------------

HUSKY_ATTACKS = {
    # the tracked script husky's runner starts on the operator's next commit (any mode)
    "husky script": "printf 'touch MARKER\\n' > .husky/pre-commit",
    # a hook name the project never used: the runner starts it as soon as it exists
    "new husky script": "printf 'touch MARKER\\n' > .husky/post-commit",
    # the runner itself, mode 0644: every stub sources it
    "runner": "sed -i '2i touch MARKER' .husky/_/h",
}


def _husky_repo(tmp_path, env):
    from gitkit import husky_install

    repo = git_repo(tmp_path / "repo", env)
    (repo / ".husky").mkdir()
    (repo / ".husky" / "pre-commit").write_text("echo checked\n")
    husky_install(repo, env)
    sh("git add .husky/pre-commit && git commit -qm husky", repo, env)
    return repo


@pytest.mark.parametrize("attack", HUSKY_ATTACKS)
def test_husky_scripts_and_runner_changed_by_the_run_are_found(tmp_path, env, attack):
    """`core.hooksPath = .husky/_`: git runs `.husky/_/pre-commit`, which sources `_/h` (0644),
    which runs `sh -e .husky/pre-commit` — a tracked file. Before session 5 only executable
    files in the hooks directory were judged: each of these ran on the operator's next commit.
    Host side: the operator's `git commit` after the quarantine runs nothing; the same files put
    back do run it (the probe is real)."""
    repo = _husky_repo(tmp_path, env)
    marker = tmp_path / "PWNED"
    snap, findings = check(repo, HUSKY_ATTACKS[attack].replace("MARKER", str(marker)), env)
    assert findings, f"{attack}: nothing found"
    moved, failed = gitcheck.quarantine(findings, snap.writable)
    assert moved and not failed, (moved, failed)
    # (with the runner in quarantine the stubs fail, and so does the commit: nothing runs until
    # the operator reinstalls husky)
    sh("git commit -q --allow-empty -m after || true", repo, env)
    assert not marker.exists(), f"{attack}: the operator's commit ran the planted script after the quarantine"
    for original, now in moved:
        os.rename(now, original)
    sh("git commit -q --allow-empty -m unchecked", repo, env)
    assert marker.exists(), f"{attack}: the planted script does not run even unchecked"


def test_work_in_a_husky_repository_is_not_flagged(tmp_path, env):
    """The twin: edits, commits (which run the husky hook), a branch — nothing under `.husky`
    changes, nothing is found."""
    repo = _husky_repo(tmp_path, env)
    snap, findings = check(repo, "echo x > f && git add f && git commit -qm two && git checkout -qb topic "
                                 "&& mkdir -p node_modules/.bin && echo y > node_modules/.bin/tool", env)
    assert findings == [], findings


def test_husky_scripts_are_protected_at_launch(tmp_path, env):
    """Prevention first: under the tier the scripts beside husky's hooks directory are bound
    read-only like the directory itself (protected.resolve_protected)."""
    from sandboy.confine import protected

    repo = _husky_repo(tmp_path, env)
    from_defaults, _ = protected.resolve_protected([str(repo)], [], True)
    assert f"{repo}/.husky/pre-commit" in from_defaults and f"{repo}/.husky/_" in from_defaults, from_defaults
    assert protected.husky_scripts(str(repo / ".husky")) == []  # not husky's hooks directory


def test_a_root_inside_a_git_directory_of_another_root_is_walked_itself(tmp_path, env):
    """The walk never enters a `.git`, so a write root below one is no root the outer walk
    covers: it stays a root of its own (a root inside another elsewhere is walked once)."""
    repo = git_repo(tmp_path / "repo", env)
    (repo / ".git" / "x").mkdir()
    (repo / "src").mkdir()
    roots = gitcheck.walk_roots([str(repo), str(repo / ".git" / "x"), str(repo / "src")])
    assert roots == [str(repo), str(repo / ".git" / "x")]


FILE_ROOTS = {
    # (the file granted for writing, what the command does with it, planted?)
    "config": (".git/config", "printf 'FSM' >> .git/config", True),
    "hook": (".git/hooks/pre-commit", "printf '#!/bin/sh\\ntouch MARKER\\n' > .git/hooks/pre-commit", True),
    "twin: a worktree file": ("notes.txt", "echo more >> notes.txt", False),
}


@pytest.mark.parametrize("case", FILE_ROOTS)
def test_a_file_granted_for_writing_is_judged_with_its_repository(tmp_path, env, case):
    """A policy may grant one file (`write = [".git/config"]`): no walk reaches a file, so the
    repository it lies in is judged. Before session 5 nothing was checked for such a root."""
    name, script, planted = FILE_ROOTS[case]
    repo = git_repo(tmp_path / "repo", env)
    (repo / "notes.txt").write_text("one\n")
    (repo / ".git" / "hooks" / "pre-commit").write_text("")
    marker = tmp_path / "PWNED"
    import time

    time.sleep(0.02)
    snap = gitcheck.snapshot([str(repo / name)], home=env["HOME"])
    assert snap is not None
    sh(script.replace("FSM", fsmonitor(marker)).replace("MARKER", str(marker)), repo, env)
    findings = snap.verify()
    if not planted:
        assert findings == [], findings
        return
    assert [f.path for f in findings] == [str(repo / name)], findings


def test_husky_8s_sourced_helper_is_judged(tmp_path, env):
    """husky 8: `core.hooksPath = .husky`, each hook sources `.husky/_/husky.sh` (0644). A run
    that changes it is found (the hooks directory's subdirectories are looked through, one
    level); a build output two levels down in a hooks directory is not judged."""
    repo = git_repo(tmp_path / "repo", env)
    (repo / ".husky" / "_").mkdir(parents=True)
    (repo / ".husky" / "_" / "husky.sh").write_text("true\n")
    (repo / ".husky" / "pre-commit").write_text('#!/bin/sh\n. "$(dirname -- "$0")/_/husky.sh"\n')
    os.chmod(repo / ".husky" / "pre-commit", 0o755)
    sh("git config core.hooksPath .husky", repo, env)
    snap, findings = check(repo, "echo 'touch /tmp/x' >> .husky/_/husky.sh && mkdir -p .husky/_/out/deep "
                                 "&& echo o > .husky/_/out/deep/build.txt", env)
    assert [f.path for f in findings] == [f"{repo}/.husky/_/husky.sh"], findings


def test_the_operators_global_config_is_parsed_again_when_it_changes(tmp_path):
    """The launch entries of `~/.gitconfig` (whose `core.hooksPath` the check follows) are kept
    between runs of one process (a gate's steps) — and parsed again once the file changes, even
    to the same size within the same clock tick."""
    import time

    path = tmp_path / ".gitconfig"
    path.write_text("[core]\n\thooksPath = aa\n")
    assert gitcheck._global_entries(str(path)) == [("core.hookspath", "aa")]
    path.write_text("[core]\n\thooksPath = bb\n")  # same size, likely the same tick
    assert gitcheck._global_entries(str(path)) == [("core.hookspath", "bb")]
    time.sleep(0.1)
    first = gitcheck._global_entries(str(path))
    assert gitcheck._global_entries(str(path)) is first  # unchanged and old: not parsed again
    path.write_text("[core]\n\thooksPath = cc\n")
    assert gitcheck._global_entries(str(path)) == [("core.hookspath", "cc")]


@pytest.mark.parametrize("text, followed", [
    ("[user]\n\tname = n\n\temail = e@example.org\n[init]\n\tdefaultBranch = main\n", []),
    ("[credential \"https://example.org\"]\n\thelper = store\n[core]\n\teditor = vi\n", []),
    ("[INCLUDE]\n\tPaTh = ~/more.inc\n", [("include.path", "~/more.inc")]),
    ('[includeIf "gitdir:~/w/"]\n\tpATH = w.inc\n', [("includeif.gitdir:~/w/.path", "w.inc")]),
    ("[Core]\n\tHOOKSPATH = hooks\n", [("core.hookspath", "hooks")]),
    ("[core]\n\teditor = vi \\\n\t\thooksPath = x\n\thooksPath = y\n", [("core.hookspath", "y")]),
], ids=["user", "credential", "include-upper", "includeif-mixed", "hookspath-upper", "continued-value"])
def test_a_global_config_is_parsed_only_where_a_key_the_check_follows_may_be(tmp_path, monkeypatch, text, followed):
    """Session 11: the operator's global configs are read at every write-root launch, and the
    check follows only `include.path`, `includeIf.*.path` and `core.hooksPath` in them — keys git
    matches in any case. A file with no `path` in its bytes (any case) is not parsed; one with
    it is, and every followed key is found whatever its case (a hooks path hidden in a continued
    value is no key, as git reads it)."""
    path = tmp_path / ".gitconfig"
    path.write_text(text)
    parsed = []
    real = gitcheck.parse_config
    monkeypatch.setattr(gitcheck, "parse_config", lambda data: parsed.append(data) or real(data))
    entries = gitcheck._global_entries(str(path))
    assert [(name, value) for name, value in entries if gitcheck.followed(name)] == followed
    assert bool(parsed) == ("path" in text.lower())
