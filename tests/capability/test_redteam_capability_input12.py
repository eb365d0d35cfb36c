"""Session 12 red team of the capability compiler from the side of hostile input (redinput12).

The repository writes owen.policy.toml AND the checkout `policy compile` / `policy check` walk:
every symlink of the checkout is matched against each write.allow glob (session 11). The pattern
matcher was a backtracking regular expression (`(?:[^/]+/)*` per `**`, `[^/]*` per `*`): a glob
of a dozen `**` against one link 30 directories deep, or of many `*` against one long name, took
exponential time — `policy check` in the operator's CI never finished. Now a set-of-positions
matcher (linear in segments x depth), a cap on segments, and a bound on all the link matching
together (a warning past it, as for MAX_LINK_SCAN). Real CLI; each probe has its twin."""

import os
import subprocess

import pytest

from policykit import sandboy_cli as _cli


@pytest.fixture
def world(tmp_path):
    """(repo, the operator's home holding a directory of theirs)."""
    home = tmp_path / "home"
    (home / "work").mkdir(parents=True)
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return repo, home


def _policy(repo, *allow: str) -> None:
    quoted = ", ".join(f'"{a}"' for a in allow)
    (repo / "owen.policy.toml").write_text(f'version = 1\ntargets = ["claude", "sandboy"]\n[write]\nallow = [{quoted}]\n')


DEEP = "/".join(["a"] * 30)
MANY_STARS = "/" + "/".join(["**"] * 16) + "/gen/*"          # 16 `**`: exponential before
LONG_NAME_STARS = "/" + "x*" * 24 + "y/gen/*"                   # 24 `*` in one name


@pytest.mark.parametrize("pattern,link_dir", [(MANY_STARS, DEEP), (LONG_NAME_STARS, "x" * 200)])
def test_a_glob_that_backtracks_does_not_hold_policy_check(world, pattern, link_dir):
    """Before: `policy check` ran for ever (more than a minute of CPU at 12 `**`, doubling with
    each more; 120 s here is only the hang guard of the CLI helper: TimeoutExpired)."""
    repo, home = world
    (repo / link_dir).mkdir(parents=True)
    (repo / link_dir / "l").symlink_to(repo / link_dir)  # a link inside: nothing to refuse
    _policy(repo, pattern)
    assert _cli(["policy", "compile"], repo, home).returncode == 0
    done = _cli(["policy", "check"], repo, home)
    assert done.returncode == 0, done.stderr


def test_twin_the_same_glob_still_refuses_a_link_it_matches_that_leads_out(world):
    repo, home = world
    (repo / DEEP / "gen").mkdir(parents=True)
    (repo / DEEP / "gen" / "out").symlink_to(home / "work")
    _policy(repo, MANY_STARS)
    done = _cli(["policy", "compile"], repo, home)
    assert done.returncode == 2 and "leads outside the repository" in done.stderr, done.stderr
    assert not (repo / ".claude").exists()  # host side: nothing written that grants ~/work


def test_a_pattern_of_more_segments_than_any_path_is_refused(world):
    repo, home = world
    _policy(repo, "/" + "/".join(["**", "a"] * 40))
    done = _cli(["policy", "compile"], repo, home)
    assert done.returncode == 2 and "segments; a pattern has at most 64" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (repo / ".claude").exists()
    _policy(repo, "/" + "/".join(["**", "a"] * 31) + "/x")  # twin: 63 segments compile
    assert _cli(["policy", "compile"], repo, home).returncode == 0


def test_every_glob_against_every_link_is_bounded(world):
    """5,000 globs x 20,000 links was hours; past MAX_LINK_MATCH_WORK the look-up stops with a
    warning, as past MAX_LINK_SCAN entries (the cage still refuses such a root at launch)."""
    repo, home = world
    links = repo / "d" / "e" / "f"
    links.mkdir(parents=True)
    for n in range(4000):
        os.symlink(".", links / f"l{n}")
    globs = [f"/**/g{n}*/**/h*" for n in range(400)]
    _policy(repo, *globs)
    done = _cli(["policy", "compile"], repo, home)
    assert done.returncode == 0, done.stderr
    assert "takes too long: symlinks a write.allow glob matches were not all looked for" in done.stderr
    assert "write those write.allow entries as directories (`src/**`" in done.stderr  # (the fix)
    # twin: a handful of globs over the same links is looked through whole, without the warning
    _policy(repo, *globs[:3])
    done = _cli(["policy", "compile"], repo, home)
    assert done.returncode == 0 and "not all looked for" not in done.stderr, done.stderr


def test_a_trailing_double_star_covers_a_name_holding_a_newline_as_git_does(tmp_path):
    """The regex's `.*` for a trailing `**` stopped at a newline: `explain` said `secrets/a<LF>b`
    was readable under read.deny `/secrets/**` while git (every ignore-file target) hides it."""
    from sandboy.capability.model import parse_pattern

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("/secrets/**\n")
    git = subprocess.run(["git", "check-ignore", "-z", "--stdin", "--no-index"], cwd=tmp_path, capture_output=True,
                         input=b"secrets/a\nb\0secrets\0", check=False).stdout
    assert git == b"secrets/a\nb\0"
    pattern = parse_pattern("t", "read.deny[0]", "/secrets/**")
    assert pattern.covers("secrets/a\nb") and not pattern.covers("secrets", is_dir=True)


def test_many_patterns_compile_in_linear_time(world):
    """Claude's merge (`v in added`, `v not in kept`: lists), its widening check and the sandboy
    target's fidelity (`item in not_roots`: a list) were quadratic in what owen.policy.toml lists:
    30,000 read.deny and 30,000 write.allow patterns (an 800 kB file, under the 1 MiB bound) held
    `policy compile` for more than 5 minutes. A few seconds now; 120 s is the hang guard."""
    import json

    repo, home = world
    patterns = [f"/d{i}/x*" for i in range(30_000)]
    (repo / "owen.policy.toml").write_text(
        'version = 1\ntargets = ["claude", "codex", "cursor", "sandboy"]\n'
        f'[read]\ndeny = {json.dumps(patterns)}\n[write]\nallow = {json.dumps([p[:-2] + "y*" for p in patterns])}\n')
    done = _cli(["policy", "compile"], repo, home)
    assert done.returncode == 0, done.stderr[-2000:]
    settings = json.loads((repo / ".claude/settings.json").read_text())
    assert len(settings["permissions"]["deny"]) == 4 * 30_000 + 7  # Read/Edit of x and x/**, and the policy files


@pytest.mark.parametrize("own", [["Bash(make test)"], ["Bash(make test)", {"odd": 1}]])
def test_the_merge_drops_what_the_policy_no_longer_says_and_keeps_the_files_own(world, own):
    """The twin of the above, and a probe of its own: a shipped settings.json holding an object (or
    a list) among the rules ended the second compile in a traceback (TypeError: unhashable type:
    'dict', exit 1) once a rule Sandboy owned had to go."""
    import json

    repo, home = world
    (repo / ".claude").mkdir()
    (repo / ".claude/settings.json").write_text(json.dumps({"permissions": {"allow": own}}))
    (repo / "owen.policy.toml").write_text('version = 1\ntargets = ["claude"]\n[write]\nallow = ["/a/y*", "/b/y*"]\n')
    assert _cli(["policy", "compile"], repo, home).returncode == 0
    (repo / "owen.policy.toml").write_text('version = 1\ntargets = ["claude"]\n[write]\nallow = ["/b/y*"]\n')
    done = _cli(["policy", "compile"], repo, home)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert json.loads((repo / ".claude/settings.json").read_text())["permissions"]["allow"] == [
        *own, "Edit(./b/y*)", "Edit(./b/y*/**)"]
    assert 'permissions.allow "Bash(make test)" is kept from the file' in done.stderr
    assert _cli(["policy", "check"], repo, home).returncode == 0
