"""Walking around the PATH-directory protection (`confine.path_dirs`, ADR 0013 session 7;
rvsec7's review): the home granted for writing, the run started in a project. Each attack tries
to leave a `git` that the operator's PATH finds before `/usr/bin/git` without writing INTO the
protected directory: a parent renamed away and a fresh directory made in its place, a symlinked
PATH directory's link replaced, the PATH entry spelled with `//` and a trailing slash. Judged from
the host side: what the operator's bash finds on their PATH after the run. Under the tier the
write fails or the run ends 125; without it the post-run check quarantines: 125."""

from __future__ import annotations

import os
import subprocess

import pytest
from cagekit import use_tier

from sandboy.confine import path_dirs

PLANT = "mkdir -p {dir} && printf '#!/bin/sh\\ntouch {pwned}\\n' > {dir}/git && chmod +x {dir}/git"

ATTACKS = {
    # ~/.local renamed away (the bind of ~/.local/bin goes with it), a fresh ~/.local/bin made
    "a parent renamed away": ("mv {home}/.local {home}/.local-old && " + PLANT.format(dir="{home}/.local/bin",
                                                                                     pwned="{pwned}"),
                              "{home}/.local/bin"),
    # ~/bin -> dotfiles/bin: the link replaced by a fresh directory
    "a symlinked PATH directory's link replaced": ("rm {home}/bin && " + PLANT.format(dir="{home}/bin", pwned="{pwned}"),
                                                   "{home}/bin"),
    # the link repointed at a directory the command fills
    "a symlinked PATH directory's link repointed": (PLANT.format(dir="{home}/evil", pwned="{pwned}")
                                                    + " && ln -sfn evil {home}/bin.new && mv -T {home}/bin.new {home}/bin",
                                                    "{home}/bin"),
    # the operator's PATH spells the entry with '//' and a trailing slash
    "the entry spelled //x/": (PLANT.format(dir="{home}/.local/bin", pwned="{pwned}"), "//{home}/.local/bin/"),
    # a literal `~/.local/bin` (`export PATH="~/.local/bin:$PATH"`): bash expands it at each lookup
    "the entry spelled ~/x (bash)": (PLANT.format(dir="{home}/.local/bin", pwned="{pwned}"), "~/.local/bin"),
}


@pytest.mark.needs_kernel
@pytest.mark.parametrize("tier", ["tier", "no-tier"])
@pytest.mark.parametrize("attack", ATTACKS)
def test_the_operators_path_cannot_be_walked_around(cage, tmp_path, monkeypatch, tier, attack):
    use_tier(tier, monkeypatch)
    home, pwned = tmp_path / "home", tmp_path / "PWNED"
    (home / ".local/bin").mkdir(parents=True)
    (home / "dotfiles/bin").mkdir(parents=True)
    os.symlink("dotfiles/bin", home / "bin")
    script, entry = ATTACKS[attack]
    entry = entry.format(home=home)
    operator_path = f"{entry}:/usr/bin:/bin"
    monkeypatch.setenv("PATH", operator_path)
    if entry.startswith("~"):
        # the operator's home: `~` in their PATH is theirs (only here: a granted home that is the
        # operator's has its start-up files protected, whose Landlock split then refuses new
        # entries in it and the post-run judge of the other cases would not be reached)
        monkeypatch.setenv("HOME", str(home))
    policy = cage.policy(fs={"read": ["/etc", "/proc/self"], "exec": ["/usr/bin", "/bin"], "write": [str(home), "."]},
                         env={"pass": [], "set": {"PATH": "/usr/bin:/bin", "HOME": str(home)}})
    result = cage.run(argv=["/bin/sh", "-c", script.format(home=home, pwned=pwned)], policy=policy, via="cli",
                      env={**os.environ})
    assert "is on PATH" in result.err, result
    # what the operator's bash runs next (it expands `~` in PATH; shutil.which does not)
    found = subprocess.run(["bash", "-c", "command -v git"], env={"PATH": operator_path, "HOME": os.environ["HOME"]},
                           capture_output=True, text=True).stdout.strip()
    assert found == "/usr/bin/git", (found, result)
    assert result.rc != 0, result


def test_a_work_directory_holding_the_home_does_not_make_its_bin_project_files(tmp_path):
    """Started from the home's parent (or `/`): the home's PATH directories stay protected."""
    home = tmp_path / "home"
    (home / ".local/bin").mkdir(parents=True)
    protect, warn = path_dirs.on_path([str(home)], work=[str(tmp_path)], path_text=f"{home}/.local/bin",
                                      home=str(home))
    assert [e for e, _r, _root in protect] == [f"{home}/.local/bin"] and not warn


@pytest.mark.needs_kernel
@pytest.mark.parametrize("tier", ["tier", "no-tier"])
def test_a_path_entry_linked_out_of_the_write_root_cannot_be_repointed(cage, tmp_path, monkeypatch, tier):
    """rvgate7: `~/.nix-profile/bin` on PATH, `~/.nix-profile -> /nix/...` (outside the write
    root): the link in the home is held — bound as itself under the tier (the rename over it
    fails), judged after the run without it (repointed: quarantined, 125)."""
    use_tier(tier, monkeypatch)
    home, pwned = tmp_path / "home", tmp_path / "PWNED"
    profile = tmp_path / "nix" / "profile"  # outside the write root, as /nix/var/nix/profiles/... is
    (profile / "bin").mkdir(parents=True)
    home.mkdir()
    os.symlink(profile, home / ".nix-profile")
    operator_path = f"{home}/.nix-profile/bin:/usr/bin:/bin"
    monkeypatch.setenv("PATH", operator_path)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(tmp_path / "cache"))  # (in the home it splits the home)
    policy = cage.policy(fs={"read": ["/etc", "/proc/self"], "exec": ["/usr/bin", "/bin"], "write": [str(home), "."]},
                         env={"pass": [], "set": {"PATH": "/usr/bin:/bin", "HOME": str(home)}})
    script = (PLANT.format(dir=f"{home}/evil/bin", pwned=pwned)
              + f" && ln -sfn evil {home}/.np.new && mv -T {home}/.np.new {home}/.nix-profile")
    result = cage.run(argv=["/bin/sh", "-c", script], policy=policy, via="cli", env={**os.environ})
    found = subprocess.run(["bash", "-c", "command -v git"], env={"PATH": operator_path, "HOME": str(home)},
                           capture_output=True, text=True).stdout.strip()
    assert found == "/usr/bin/git", (found, result)
    assert result.rc != 0, result
    if tier == "tier":  # the link bound as itself: the rename over it failed, the link is the operator's
        assert os.readlink(home / ".nix-profile") == str(profile), result
    else:  # repointed, then judged after the run: quarantined
        assert result.rc == 125 and "repointed" in result.err, result
    assert not pwned.exists()


@pytest.mark.needs_kernel
@pytest.mark.parametrize("tier", ["tier", "no-tier"])
def test_path_entries_linked_out_left_alone_work(cage, tmp_path, monkeypatch, tier):
    """The twin: a Nix-style link in the home left alone, and a PATH entry through a link that no
    write root holds (`/opt/tools -> ...`): no finding, the run succeeds — and a program the
    command writes in its own project still works."""
    use_tier(tier, monkeypatch)
    home, outside = tmp_path / "home", tmp_path / "outside"
    profile = tmp_path / "nix" / "profile"
    (profile / "bin").mkdir(parents=True)
    (tmp_path / "tools/bin").mkdir(parents=True)
    home.mkdir()
    outside.mkdir()
    os.symlink(profile, home / ".nix-profile")
    os.symlink(tmp_path / "tools", outside / "tools")  # a link no write root holds
    operator_path = f"{home}/.nix-profile/bin:{outside}/tools/bin:/usr/bin:/bin"
    monkeypatch.setenv("PATH", operator_path)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(tmp_path / "cache"))
    protect, _warn = path_dirs.on_path([str(home)], path_text=operator_path, home=str(home))
    assert [(e, root) for e, _r, root in protect] == [(f"{home}/.nix-profile/bin", str(home))]
    assert path_dirs.held(*protect[0]) == [f"{home}/.nix-profile"]  # the link, not the directory outside
    policy = cage.policy(fs={"read": ["/etc", "/proc/self"], "exec": ["/usr/bin", "/bin"], "write": [str(home), "."]},
                         env={"pass": [], "set": {"PATH": "/usr/bin:/bin", "HOME": str(home)}})
    result = cage.run(argv=["/bin/sh", "-c", f"echo work > {home}/notes && test -L {home}/.nix-profile"],
                      policy=policy, via="cli", env={**os.environ})
    assert result.rc == 0, result
    assert (home / "notes").read_text() == "work\n"
    assert os.readlink(home / ".nix-profile") == str(profile)


def test_a_link_repointed_between_two_looks_is_seen(tmp_path):
    """`_RESOLVED` (per process) does not hide a link repointed between two gate steps: the
    second look resolves the entry again."""
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "nix/bin").mkdir(parents=True)
    (home / "evil/bin").mkdir(parents=True)
    os.symlink(tmp_path / "nix", home / ".nix-profile")
    text = f"{home}/.nix-profile/bin"
    protect, _ = path_dirs.on_path([str(tmp_path / "other")], path_text=text, home=str(home))
    assert not protect  # no write root holds the link: nothing
    protect, _ = path_dirs.on_path([str(home)], path_text=text, home=str(home))
    assert [r for _e, r, _root in protect] == [str(tmp_path / "nix/bin")]
    os.symlink("evil", home / ".np")
    os.rename(home / ".np", home / ".nix-profile")  # what a step could do
    protect, _ = path_dirs.on_path([str(home)], path_text=text, home=str(home))
    assert [r for _e, r, _root in protect] == [str(home / "evil/bin")]
