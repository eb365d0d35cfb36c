"""What the gate now looks up once instead of before every step (session 8): the git check's Scope
of a cage (`LaunchRecord.scope_for`) and the ceiling grants no step can redirect
(`RepositoryLinks.fixed`). Both rest on one rule, `resolve.lookup_changeable`: a step writes only
inside the gate's write roots, so a lookup that reads no directory inside them resolves the same
at every step. What a step CAN change is still looked up per step.

Probes (from the host side):
- a step cannot change what the repository's own path resolves to (it tries to move the
  repository away and put a link to a secret in its place: the repository is the same directory
  afterwards, the next step reads no secret and passes through the same ceiling);
- a ceiling that lets steps write the operator's home: the git check's Scope holds the global git
  configs, whose lookup a step CAN change there, so that Scope is made per step (checked on
  `scope_for` itself); and end to end, a step that tries to replace the `~/.config` link (leading
  out of every write root) by a directory, then the next that plants `core.fsmonitor` in
  `~/.config/git/config`, leave no planted config anywhere (the link is held — or, were it
  replaced, the next step's check judges the config: 125). Twin: the built-in ceiling's Scope is
  kept, and the first probe's honest step passes through the same ceiling.
"""

from __future__ import annotations

import os

from gatekit import by_name, make_repo, run_json

from sandboy.gate import ceiling as ceilings


def test_a_step_cannot_redirect_the_repository_path_looked_up_once(tmp_path, fake_home):
    secret = tmp_path / "operator"
    secret.mkdir()
    (secret / "key").write_text("operator's secret\n")
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "redirect"
        run = '''cd .. && (mv repo repo.old && ln -s {secret} repo && echo MOVED) 2>&1; true'''

        [[step]]
        name = "read"
        run = '''cat key 2>/dev/null && echo LEAKED; cat .007/gate.toml >/dev/null && echo SAME-REPO'''
    """)
    inode = os.stat(repo).st_ino
    logs = tmp_path / "logs"
    proc, report = run_json(repo, tmp_path, "--logs", logs, home=fake_home)
    assert os.path.isdir(repo) and not os.path.islink(repo) and os.stat(repo).st_ino == inode
    assert not (tmp_path / "repo.old").exists()
    redirect, read = (logs / "redirect.log").read_text(), (logs / "read.log").read_text()
    assert "MOVED" not in redirect, redirect
    assert "LEAKED" not in read and "SAME-REPO" in read, read
    steps = by_name(report)
    assert steps["read"]["status"] == "passed" and not steps["read"]["narrowings"], steps["read"]
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _ceiling_writing_home(tmp_path) -> str:
    path = tmp_path / "ceiling.toml"
    fs = {**ceilings.BUILTIN["fs"], "write": [*ceilings.BUILTIN["fs"]["write"], "{home}"],
          "read": [*ceilings.BUILTIN["fs"]["read"], "{home}"]}
    path.write_text(ceilings.to_toml({**ceilings.BUILTIN, "fs": fs}))
    return str(path)


def test_a_global_config_a_step_moved_into_reach_is_judged_in_the_next_step(tmp_path, fake_home):
    dotfiles = tmp_path / "dotfiles"  # the operator's: outside every write root
    dotfiles.mkdir()
    (fake_home / ".config").symlink_to(dotfiles)
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "swap"
        run = '''rm {fake_home}/.config && mkdir {fake_home}/.config && echo SWAPPED'''

        [[step]]
        name = "plant"
        run = '''mkdir -p {fake_home}/.config/git && printf '[core]\\n\\tfsmonitor = "touch {tmp_path}/pwned"\\n' > {fake_home}/.config/git/config && echo PLANTED'''
    """)
    logs = tmp_path / "logs"
    proc, report = run_json(repo, tmp_path, "--ceiling", _ceiling_writing_home(tmp_path), "--logs", logs,
                            "--keep-going", home=fake_home)
    steps = by_name(report)
    swap, plant = steps["swap"], steps["plant"]
    if swap["status"] == "passed":  # the link was replaced: the planted config must be judged
        assert plant["status"] == "cage_error" and "fsmonitor" in plant["error"], plant
    else:  # the link leading out is held (a protected path on the way): nothing could be planted
        assert "SWAPPED" not in (logs / "swap.log").read_text()
        assert (fake_home / ".config").is_symlink()
        assert "PLANTED" not in (logs / "plant.log").read_text(), plant
    for config in (fake_home / ".config" / "git" / "config", dotfiles / "git" / "config"):
        assert not config.exists() or "fsmonitor" not in config.read_text(), f"{config} holds the planted hook"
    assert not (tmp_path / "pwned").exists()
    assert proc.returncode != 0, proc.stdout + proc.stderr


def test_the_built_in_ceilings_scope_is_kept_and_a_writable_homes_is_not(tmp_path, fake_home, monkeypatch):
    """Which Scopes are kept: the built-in ceiling's (its lookups read no directory a step can
    write) — and not one whose global configs lie in a home the steps may write."""
    monkeypatch.setenv("HOME", str(fake_home))
    from sandboy.confine.cage import build
    from sandboy.confine.gitcheck import LaunchRecord
    from sandboy.gate.repository_links import RepositoryLinks
    from sandboy.gate.runner import resolve_ceiling

    repo = make_repo(tmp_path, "[[step]]\nname = 'x'\nrun = 'true'\n")
    kept = {}
    for name, source in (("builtin", None), ("home", _ceiling_writing_home(tmp_path))):
        ceiling = resolve_ceiling(ceilings.builtin() if source is None else ceilings.load(source), str(repo))
        record = LaunchRecord(reach=RepositoryLinks(ceiling, str(repo)).roots)
        cage = build(ceiling, cwd=str(repo), repo=str(repo))
        try:
            first = record.scope_for(cage)
            kept[name] = record.scope_for(cage) is first and first is not None
        finally:
            cage.close()
    assert kept == {"builtin": True, "home": False}, kept
