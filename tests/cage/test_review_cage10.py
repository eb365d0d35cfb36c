"""Session 10 final review (rvsec10) of the write-root shortcuts from the attacker's side: gitfast's
by-stats judgement and census-listing reuse (gitcheck), writehit's protected-path watch and settled
put_back, redcage10's `loosened._reached_elsewhere` records. Each probe is a real `sandboy run` on
the real kernel, checked from the host side (bytes, where files are); see docs/threat-model.md
("Session 10 review of the cage")."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_redteam_cage10 import BASE, _env, _sandboy_run, _tier_env  # noqa: E402

pytestmark = pytest.mark.needs_kernel


def test_a_big_hard_linked_start_up_file_rewritten_with_its_mtime_set_back_is_found(tmp_path):
    """A protected file with another hard link in the write root and more than
    loosened.MAX_LINKED_BYTES (no launch bytes kept): the guard compared size and MTIME — which the
    file's owner sets back at will (`touch -r`). Rewritten in place through its other name, same
    size, mtime put back: passed rc 0, the operator's `.bashrc` carried the plant. The ctime, which
    no process sets back, must tell."""
    env = _env(tmp_path, **_tier_env(True), SANDBOY_PLAN_CACHE="0")
    home = tmp_path / "H"
    (home / "dotfiles").mkdir(parents=True)
    body = "# " + "x" * (2 << 20) + "\necho operator\n"
    (home / "dotfiles" / "bashrc").write_text(body)
    os.link(home / "dotfiles" / "bashrc", home / ".bashrc")
    policy = tmp_path / "p.toml"
    policy.write_text(BASE.format(root=home))
    env.update(HOME=str(home))
    script = ("touch -r dotfiles/bashrc ref && printf 'echo PLANTED #' | dd of=dotfiles/bashrc conv=notrunc "
              "status=none && touch -r ref dotfiles/bashrc")
    proc = _sandboy_run(policy, script, env, home)
    where = home / ".bashrc"
    planted = where.exists() and where.read_bytes().startswith(b"echo PLANTED")
    assert not (planted and proc.returncode == 0), "written through the hard link, mtime set back: rc 0"
    assert proc.returncode == 125 and "hard link" in proc.stderr, proc.stderr
    assert not planted  # (moved: its launch bytes were not kept, so nothing put back)


def test_twin_a_big_hard_linked_start_up_file_read_and_its_neighbours_written_pass(tmp_path):
    """The twin: the same big hard-linked `.bashrc` read (its atime may move), the other dotfiles
    written: rc 0, nothing moved."""
    env = _env(tmp_path, **_tier_env(True), SANDBOY_PLAN_CACHE="0")
    home = tmp_path / "H"
    (home / "dotfiles").mkdir(parents=True)
    (home / "dotfiles" / "bashrc").write_text("# " + "x" * (2 << 20) + "\necho operator\n")
    os.link(home / "dotfiles" / "bashrc", home / ".bashrc")
    (home / "dotfiles" / "vimrc").write_text("set nu\n")
    policy = tmp_path / "p.toml"
    policy.write_text(BASE.format(root=home))
    env.update(HOME=str(home))
    proc = _sandboy_run(policy, "tail -n 1 dotfiles/bashrc && echo twin >> dotfiles/vimrc", env, home)
    assert proc.returncode == 0 and proc.stdout == "echo operator\n", proc.stderr
    assert (home / "dotfiles" / "vimrc").read_text() == "set nu\ntwin\n"
    assert not (home / ".sandboy-quarantine").exists()
