"""Session 11 red team of the capability compiler, from the repository's side.

The repository writes owen.policy.toml and ships the tree compile runs in; the operator runs
`sandboy policy compile` (or `check` in CI), then an agent under the files it wrote. Each probe
runs the real CLI and looks at the host's bytes; each has a legitimate twin."""

import json
import os
import subprocess

import pytest

from policykit import sandboy_cli as _cli


@pytest.fixture
def world(tmp_path):
    """(repo, the operator's home holding a directory of theirs)."""
    home = tmp_path / "home"
    (home / "work").mkdir(parents=True)
    (home / "work/notes.txt").write_text("mine\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return repo, home


def _written_grants(repo) -> dict:
    """What the generated agent files grant for writing, as written (None: file absent)."""
    out = {}
    settings = repo / ".claude/settings.json"
    if settings.exists():
        doc = json.loads(settings.read_text())
        out["claude"] = doc.get("sandbox", {}).get("filesystem", {}).get("allowWrite")
    config = repo / ".codex/config.toml"
    if config.exists():
        import tomllib

        roots = tomllib.loads(config.read_text())["permissions"]["owen"]["filesystem"][":workspace_roots"]
        out["codex"] = sorted(k for k, v in roots.items() if v == "write")
    return out


# --- a write root the checkout links out of the repository ---------------------------------------

@pytest.mark.parametrize("allow", ["/src", "/src/gen", "/src/**", "src/gen/"])
@pytest.mark.parametrize("verb", ["compile", "check"])
def test_a_write_root_the_checkout_links_out_of_the_repository_is_refused(world, allow, verb):
    """write.allow ["/src"] with the checkout's `src -> ~/work`: compile wrote `"./src"` into
    Claude Code's `sandbox.filesystem.allowWrite` and `"src" = "write"` into the Codex profile —
    grants their sandboxes resolve through the link, to the operator's ~/work — and `explain src/x`
    said "inside a write root" for every target, while the cage refuses that very root at launch
    (ADR 0026). A repository path stays inside the repository: compile and check refuse it (exit 2,
    naming the key and the link), as the cage does, and write nothing."""
    repo, home = world
    (repo / "src").symlink_to(home / "work")
    (repo / "owen.policy.toml").write_text(
        f'version = 1\ntargets = ["claude", "codex", "sandboy"]\n[write]\nallow = [{json.dumps(allow)}]\n')
    run = _cli(["policy", verb], repo, home)
    # host side: nothing generated that an agent would read as a grant of the operator's ~/work
    assert _written_grants(repo) == {}, _written_grants(repo)
    assert not (repo / ".sandboy").exists()
    assert run.returncode == 2, (run.returncode, run.stdout, run.stderr)
    assert "owen.policy.toml: write.allow[0]: " in run.stderr and "'src'" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    assert sorted(os.listdir(home / "work")) == ["notes.txt"]


@pytest.mark.parametrize("target", ["outside-absolute", "outside-relative", "dangling-outside"])
def test_every_way_of_leading_out_is_refused(world, target):
    repo, home = world
    link = {"outside-absolute": str(home / "work"), "outside-relative": "../home/work",
            "dangling-outside": str(home / "nothing-yet")}[target]
    os.symlink(link, repo / "src")
    (repo / "owen.policy.toml").write_text('version = 1\ntargets = ["codex"]\n[write]\nallow = ["/src"]\n')
    run = _cli(["policy", "compile"], repo, home)
    assert run.returncode == 2 and "write.allow[0]" in run.stderr, run.stderr
    assert not (repo / ".codex").exists()


def test_twin_a_write_root_linked_inside_the_repository_compiles(world):
    """`src -> lib` (inside): compiled as before, for every target; only a lookup leaving the
    repository is refused."""
    repo, home = world
    (repo / "lib").mkdir()
    (repo / "src").symlink_to("lib")
    (repo / "owen.policy.toml").write_text(
        'version = 1\ntargets = ["claude", "codex", "sandboy"]\n[write]\nallow = ["/src", "/docs/**", "build/"]\n')
    run = _cli(["policy", "compile"], repo, home)
    assert run.returncode == 0, run.stderr
    grants = _written_grants(repo)
    assert "./src" in grants["claude"] and "src" in grants["codex"]
    assert _cli(["policy", "check"], repo, home).returncode == 0


def test_twin_ignore_file_targets_grant_no_writes_and_are_not_stopped(world):
    """The ignore files say nothing about writing: a policy naming only them compiles whatever the
    checkout links (nothing in them grants a write)."""
    repo, home = world
    (repo / "src").symlink_to(home / "work")
    (repo / "owen.policy.toml").write_text(
        'version = 1\ntargets = ["cursor"]\nread.deny = [".env"]\n[write]\nallow = ["/src"]\n')
    run = _cli(["policy", "compile"], repo, home)
    assert run.returncode == 0, run.stderr
    assert (repo / ".cursorignore").read_text().splitlines()[1:] == [".env"]
