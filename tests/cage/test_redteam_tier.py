"""Red-team probes against the namespace tier and protected paths (issue #7): attacks an
independent attacker found to work, each checked from the HOST side, with the twin that
legitimate work still succeeds. Holes not closed yet are `xfail(strict=True)` with the reason,
so they document themselves and turn red the day they are fixed (then drop the mark). The
commondir and submodule holes are closed by the post-run git check (ADR 0019).
"""

from __future__ import annotations

import os
import subprocess

import pytest
from gitkit import GIT_ENV
from gitkit import fsmonitor as _fsmonitor
from gitkit import host_git_status as _host_git_status
from gitkit import host_repo as _host_repo

pytestmark = pytest.mark.needs_kernel


@pytest.fixture(autouse=True)
def _tier():
    from sandboy.confine import namespaces

    ok, why = namespaces.availability()
    if not ok:
        pytest.skip(f"namespace tier unavailable here ({why}); without it the default protected set "
                    "is reported degraded (tests/cage/test_protect.py)")


def _policy(cage, **sections):
    return cage.policy(fs={"read": ["/etc", "/proc/self"], "exec": ["/usr/bin", "/bin", "/usr/lib/git-core"],
                           "write": ["."]},
                       env={"pass": [], "set": {"PATH": "/usr/bin:/bin", "HOME": str(cage.work), **GIT_ENV}},
                       **sections)


@pytest.mark.parametrize("via", ["api", "cli"])
def test_a_renamed_git_dir_cannot_be_replaced_by_a_planted_one(cage, tmp_path, via):
    """`mv .git .git.old; mkdir .git; cp ...; append core.fsmonitor` worked: only the protected
    paths were mount points, and a directory holding a mount point can be renamed. The host then
    saw a fresh .git whose config ran the planted command on the operator's next `git status`."""
    _host_repo(cage.work)
    config = (cage.work / ".git" / "config").read_bytes()
    marker = tmp_path / "PWNED"
    script = ("mv .git .git.old; mkdir -p .git && cp -r .git.old/. .git/; "
              f"printf '{_fsmonitor(marker)}' >> .git/config; "
              # the twin, in the same run: git still works in the pinned .git
              "echo x > f && git add f && git commit -qm two && echo COMMITTED")
    result = cage.run(argv=["/bin/sh", "-c", script], policy=_policy(cage), via=via)
    assert "COMMITTED" in result.out, result
    assert not (cage.work / ".git.old").exists()
    assert (cage.work / ".git" / "config").read_bytes() == config
    _host_git_status(cage.work)
    assert not marker.exists(), "the host's git ran a command planted by the cage"
    log = subprocess.run(["git", "-C", str(cage.work), "log", "--format=%s"], capture_output=True, text=True)
    assert log.stdout.split() == ["two", "init"]


def test_a_renamed_parent_of_a_protected_file_cannot_be_replaced(cage):
    """The same attack on a deeper `fs.protect` entry: every directory between the write root
    and the protected path stays in place; files in them stay writable."""
    deep = cage.work / "conf" / "deep"
    deep.mkdir(parents=True)
    (deep / "settings.ini").write_text("safe = 1\n")
    script = ("mv conf conf.old || mv conf/deep conf/deep.old; mkdir -p conf/deep; "
              "echo 'evil = 1' > conf/deep/settings.ini; echo fine > conf/deep/other && echo WROTE")
    policy = _policy(cage)
    policy["fs"]["protect"] = ["conf/deep/settings.ini"]
    result = cage.run(argv=["/bin/sh", "-c", script], policy=policy)
    assert "WROTE" in result.out, result
    assert (deep / "settings.ini").read_text() == "safe = 1\n"
    assert (deep / "other").read_text() == "fine\n"
    assert sorted(os.listdir(cage.work)) == ["conf"] and sorted(os.listdir(cage.work / "conf")) == ["deep"]


def test_a_planted_commondir_does_not_redirect_the_hosts_git(cage, tmp_path):
    _host_repo(cage.work)
    marker = tmp_path / "PWNED"
    script = ("mkdir evil && cp -r .git/objects .git/refs evil/ && "
              f"printf '{_fsmonitor(marker)}' > evil/config && echo ../evil > .git/commondir && echo PLANTED")
    result = cage.run(argv=["/bin/sh", "-c", script], policy=_policy(cage))
    # no mount can protect a name absent at launch: the parent's post-run check finds it, moves
    # it into the quarantine and fails the run (ADR 0019; every mode in test_git_planted.py)
    assert "PLANTED" in result.out and result.rc == 125, result
    assert not (cage.work / ".git" / "commondir").exists()
    _host_git_status(cage.work)
    assert not marker.exists(), "the host's git ran a command planted through .git/commondir"


def test_tmpfs_mounts_are_bounded_so_a_cage_cannot_fill_the_hosts_memory(cage):
    """{tmp} and /dev/shm were tmpfs mounts of the kernel's default size, half the RAM EACH
    (12 GiB apiece here), whose pages count against no rlimit of the command. Now /dev/shm is
    64 MiB and {tmp} the run's memory limit (a quarter of the RAM without one)."""
    policy = _policy(cage, limits={"memory_mib": 256})
    policy["fs"]["write"] = [".", "{tmp}"]
    script = ('df -k --output=size /dev/shm "$TMPDIR" | tail -n 2; '
              "head -c 80M /dev/zero > /dev/shm/fill 2>/dev/null; echo shm_rc=$?; rm -f /dev/shm/fill; "
              'head -c 300M /dev/zero > "$TMPDIR/fill" 2>/dev/null; echo tmp_rc=$?; rm -f "$TMPDIR/fill"; '
              "echo x > /dev/shm/ok && echo SHM_WORKS")
    result = cage.run(argv=["/bin/sh", "-c", script], policy=policy)
    sizes = [int(line) for line in result.out.split()[:2]]
    assert sizes == [64 * 1024, 256 * 1024], result
    assert "shm_rc=1" in result.out and "tmp_rc=1" in result.out, result  # ENOSPC, not the host's RAM
    assert "SHM_WORKS" in result.out, result


def test_tmp_without_a_memory_limit_is_a_quarter_of_the_ram(cage):
    policy = _policy(cage)
    policy["fs"]["write"] = [".", "{tmp}"]
    result = cage.run(argv=["/bin/sh", "-c", 'df -k --output=size "$TMPDIR" | tail -n 1'], policy=policy)
    ram_kib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 1024
    assert 0 < int(result.out) <= ram_kib // 4 + 4096, result


def test_the_init_is_out_of_reach(cage):
    """Cheap regression probes that were refused: the command cannot read the init's fds (the
    error pipe carrying its wait status), environment or root, cannot signal it, and /proc/sys
    and the host's sysrq trigger are read-only or absent."""
    script = ("readlink /proc/1/fd/* 2>/dev/null && echo FD_LEAK; cat /proc/1/environ 2>/dev/null && echo ENV_LEAK; "
              "for f in /proc/1/fd/*; do echo forged > $f 2>/dev/null && echo FORGED; done; "
              "ls /proc/1/root/ 2>/dev/null && echo ROOT_LEAK; kill -KILL 1 2>/dev/null && echo KILLED; "
              "echo 1 > /proc/sys/vm/drop_caches 2>/dev/null && echo SYSCTL; "
              "echo h > /proc/sysrq-trigger 2>/dev/null && echo SYSRQ; exit 7")
    policy = _policy(cage)
    policy["fs"]["read"] += ["/proc"]
    result = cage.run(argv=["/bin/sh", "-c", script], policy=policy)
    assert result.rc == 7, result
    for leak in ("FD_LEAK", "ENV_LEAK", "FORGED", "ROOT_LEAK", "KILLED", "SYSCTL", "SYSRQ"):
        assert leak not in result.out, result


def test_a_planted_submodule_does_not_run_code_on_the_hosts_git_status(cage, tmp_path):
    _host_repo(cage.work)
    marker = tmp_path / "PWNED"
    script = ("git init -q sub && git -C sub commit -q --allow-empty -m s && "
              f"printf '{_fsmonitor(marker)}' >> sub/.git/config && "
              "git update-index --add --cacheinfo 160000,$(git -C sub rev-parse HEAD),sub && echo PLANTED")
    result = cage.run(argv=["/bin/sh", "-c", script], policy=_policy(cage))
    assert "PLANTED" in result.out and result.rc == 125, result  # found after the run (ADR 0019)
    assert not (cage.work / "sub" / ".git" / "config").exists()
    _host_git_status(cage.work)
    assert not marker.exists(), "the host's git status ran a command planted in a nested repository"


def test_hard_links_to_protected_files_are_refused(cage):
    """A hard link from the write root to a protected file would survive on the host as a
    second name for it; the read-only bind is another mount, so link() gets EXDEV."""
    _host_repo(cage.work)
    script = "ln .git/config cfg; ln .git/hooks/pre-commit.sample hook; ls"
    result = cage.run(argv=["/bin/sh", "-c", script], policy=_policy(cage))
    assert "Invalid cross-device link" in result.err or "cross-device" in result.out + result.err, result
    assert not (cage.work / "cfg").exists() and not (cage.work / "hook").exists()


@pytest.mark.parametrize("value", [".husky/_", '"hooks dir"'])
def test_a_configured_hooks_path_in_the_worktree_is_protected(cage, tmp_path, value):
    """husky and friends set `core.hooksPath` to a worktree directory (`.husky/_`): git runs
    the operator's hooks from there, and the write root reached it, so a planted `pre-commit`
    ran on the operator's next commit. It is protected like `.git/hooks` now."""
    _host_repo(cage.work)
    hooks = cage.work / value.strip('"')
    hooks.mkdir(parents=True)
    subprocess.run(["git", "-C", str(cage.work), "config", "core.hooksPath", value.strip('"')], check=True)
    marker = tmp_path / "PWNED"
    script = (f"printf '#!/bin/sh\\ntouch {marker}\\n' > '{hooks}/pre-commit'; chmod +x '{hooks}/pre-commit'; "
              f"mv '{hooks}' moved; echo x > f && git add f && git commit -qm two && echo COMMITTED")
    result = cage.run(argv=["/bin/sh", "-c", script], policy=_policy(cage))
    assert "COMMITTED" in result.out, result
    assert os.listdir(hooks) == []  # (a `mv` across the pinned mounts may leave a copy: harmless)
    subprocess.run(["git", "-C", str(cage.work), "commit", "-q", "--allow-empty", "-m", "host"], check=True,
                   env={**os.environ, **GIT_ENV})
    assert not marker.exists(), "the operator's commit ran a hook the cage planted"


def test_hooks_path_reader():
    from sandboy.confine.protected import _config_hooks_path

    cases = {
        "[core]\n\thooksPath = .husky/_\n": ".husky/_",
        "[Core]\n  HOOKSPATH=\"with space\" \n": "with space",
        "[core]\n\thookspath = a ; comment\n[user]\n\thooksPath = nope\n": "a",
        "[core] hooksPath = inline\n": "inline",
        "[core]\n\thooksPath = first\n\thooksPath = last\n": "last",
        "[user]\n\thooksPath = x\n": None,
    }
    import tempfile

    for text, expected in cases.items():
        with tempfile.NamedTemporaryFile("w", suffix=".config") as fh:
            fh.write(text)
            fh.flush()
            assert _config_hooks_path(fh.name) == expected, text


PTY_FLOOD = """
import os
fds = []
try:
    while len(fds) < 5000:
        fds.append(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))
except OSError as exc:
    print("stopped", exc.errno)
print("opened", len(fds))
"""


def test_a_cage_cannot_take_every_pty_of_the_host(cage):
    """The private devpts had no `max`: a cage opened 3071 ptys (kernel.pty.max minus the host's
    reserve) and held them, so no other container or sandbox could get one meanwhile."""
    result = cage.run(argv=["python3", "-c", PTY_FLOOD], policy=_policy(cage, limits={"open_files": 6000}))
    opened = int(result.out.split("opened")[1])
    assert 1 <= opened <= 64, result  # twin: a pty still opens
    assert "stopped 28" in result.out, result  # ENOSPC from devpts, not EMFILE


@pytest.mark.parametrize("layout", ["file-link", "dir-link", "chained-links"])
def test_a_symlinked_start_up_file_cannot_be_replaced(cage, layout):
    """Dotfile managers (stow, chezmoi, yadm) make `~/.bashrc` a symlink into a dotfiles
    directory. Only the link's TARGET was bound read-only; the link itself sat in the write root:
    `rm .bashrc; echo ... > .bashrc` replaced the operator's start-up file. Every link on the way
    to a protected path is now bound over itself (EBUSY on unlink/rename)."""
    (cage.work / "dots").mkdir()
    (cage.work / "dots" / "bashrc").write_text("safe\n")
    if layout == "file-link":
        os.symlink("dots/bashrc", cage.work / ".bashrc")
    elif layout == "dir-link":
        (cage.work / ".config").mkdir()
        (cage.work / "dots" / "git").mkdir()
        (cage.work / "dots" / "git" / "config").write_text("safe\n")
        os.symlink("../dots/git", cage.work / ".config" / "git")
        os.symlink("dots/bashrc", cage.work / ".bashrc")
    else:
        os.symlink("dots", cage.work / ".dotfiles")
        os.symlink(".dotfiles/bashrc", cage.work / ".bashrc")
    script = ("rm -f .bashrc; echo planted > .bashrc; rm -f .dotfiles && mkdir .dotfiles && echo planted > .dotfiles/bashrc; "
              "rm -f .config/git; mkdir -p .config/git && echo planted > .config/git/config; "
              "echo fine > dots/other && echo TRIED")
    result = cage.run(argv=["/bin/sh", "-c", script], policy=_policy(cage))
    assert "TRIED" in result.out, result  # twin: the dotfiles directory itself stays writable
    assert (cage.work / "dots" / "bashrc").read_text() == "safe\n"
    assert os.path.islink(cage.work / ".bashrc"), "the operator's ~/.bashrc is now a file the cage wrote"
    assert (cage.work / ".bashrc").read_text() == "safe\n"
    if layout == "dir-link":
        assert os.path.islink(cage.work / ".config" / "git")
        assert (cage.work / ".config" / "git" / "config").read_text() == "safe\n"
    if layout == "chained-links":
        assert os.path.islink(cage.work / ".dotfiles")


def test_symlinks_on_the_way(tmp_path):
    from sandboy.confine.protected import symlinks_on_the_way

    (tmp_path / "dots").mkdir()
    os.symlink("dots", tmp_path / ".dotfiles")
    os.symlink(".dotfiles/bashrc", tmp_path / ".bashrc")
    assert symlinks_on_the_way(str(tmp_path / ".bashrc")) == [str(tmp_path / ".bashrc"), str(tmp_path / ".dotfiles")]
    assert symlinks_on_the_way(str(tmp_path / "dots")) == []
    os.symlink("loop", tmp_path / "loop")
    assert len(symlinks_on_the_way(str(tmp_path / "loop"))) <= 41  # bounded on a loop


@pytest.mark.parametrize("section", ["include", 'includeIf "gitdir:**"'])
def test_a_config_the_repository_includes_from_the_worktree_is_protected(cage, tmp_path, section):
    """`git config include.path ../tools/gitconfig` (shared settings kept in the worktree): git
    reads that file as its own config, and the write root reached it — a planted core.fsmonitor
    there ran on the operator's next `git status`."""
    _host_repo(cage.work)
    (cage.work / "tools").mkdir()
    (cage.work / "tools" / "gitconfig").write_text("[alias]\n\tst = status\n")
    with open(cage.work / ".git" / "config", "a") as fh:
        fh.write(f'[{section}]\n\tpath = ../tools/gitconfig\n')
    marker = tmp_path / "PWNED"
    script = (f"printf '{_fsmonitor(marker)}' >> tools/gitconfig; echo x > tools/other && git add tools/other "
              "&& git commit -qm two && echo COMMITTED")
    result = cage.run(argv=["/bin/sh", "-c", script], policy=_policy(cage))
    assert "COMMITTED" in result.out, result
    assert (cage.work / "tools" / "gitconfig").read_text() == "[alias]\n\tst = status\n"
    _host_git_status(cage.work)
    assert not marker.exists(), "the host's git ran a command planted in an included config"
