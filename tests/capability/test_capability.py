"""The capability policy compiler (docs/capability.md): strict validation, every gitignore-style
output decides like the canonical policy (checked with pathspec, a maintained gitignore matcher),
Claude/Codex merges keep the user's keys and drop stale owned rules, `check` catches drift, and
the generated .sandboy/agent.toml really enforces reads, writes and domains (checked on the host)."""

import json
import subprocess
import sys
import tomllib

import pathspec
import pytest

from sandboy.capability import compiler, explain, model
from sandboy.capability.targets import TARGETS
from sandboy.errors import PolicyError

SANDBOY = [sys.executable, "-m", "sandboy"]
POLICY = """version = 1
targets = ["cursor", "claude", "codex", "gemini", "aider", "windsurf", "jetbrains", "aiexclude", "sandboy"]
[read]
deny = [".env", ".env.*", "*.pem", "secrets/", "/config/prod.yaml", "deep/**/token.txt", "!.env.example",
        "!secrets/readme"]
[index]
exclude = ["build/", "*.min.js", "/vendor"]
[write]
deny = ["/Makefile"]
[exec]
allow = ["npm run test"]
deny = ["git push"]
[network]
domains = ["pypi.org"]
"""

MATRIX = [
    ".env", "a/.env", "a/b/.env", ".env.local", "x/.env.prod", "env", ".envrc", "key.pem", "a/b/c.pem",
    "pem", "secrets/x", "secrets/a/b", "a/secrets/x", "secrets", "config/prod.yaml", "a/config/prod.yaml",
    "config/dev.yaml", "deep/token.txt", "deep/a/b/token.txt", "x/deep/token.txt", "build/out.o",
    "src/build/x", "build", "app.min.js", "a/app.min.js", "vendor/lib.py", "a/vendor/lib.py", "src/main.py",
    "Makefile", "README.md", ".env.example", "a/.env.example", "secrets/readme", "a/secrets/readme",
]


def _policy(tmp_path, text=POLICY):
    (tmp_path / "owen.policy.toml").write_text(text)
    return model.load(str(tmp_path / "owen.policy.toml"))


def _cli(*args, cwd):
    return subprocess.run([*SANDBOY, "policy", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def _git_ignored(workdir, ignore_text, paths) -> set:
    """What git itself (`git check-ignore --no-index`, the reference gitignore matcher) ignores."""
    (workdir / ".gitignore").write_text(ignore_text)
    run = subprocess.run(["git", "-C", str(workdir), "check-ignore", "--no-index", "--stdin"],
                         input="\n".join(paths) + "\n", capture_output=True, text=True, timeout=60)
    assert run.returncode in (0, 1), run.stderr
    return set(run.stdout.split())


# pathspec (like some agents' matchers) re-includes a file inside an excluded directory; git does
# not. The canonical policy follows git; the fidelity table says the agents may differ here.
PATHSPEC_DIFFERS = {"secrets/readme"}


def test_every_ignore_file_decides_like_the_policy(tmp_path):
    policy = _policy(tmp_path)
    files = compiler.render(policy, str(tmp_path))
    work = tmp_path / "git"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    checked = 0
    for name in policy.targets:
        for rel in TARGETS[name].files:
            if rel.endswith((".json", ".toml")):
                continue
            spec = pathspec.GitIgnoreSpec.from_lines(files[rel].splitlines())
            by_git = _git_ignored(work, files[rel], MATRIX)
            for path in MATRIX:
                if rel == ".cursorindexingignore":
                    want = any(p.covers(path) for p in policy.index_exclude)
                elif rel == ".cursorignore":
                    want = policy.read_rule(path) is not None
                else:
                    want = policy.index_rule(path) is not None
                assert (path in by_git) == want, (rel, path, "git")
                if path in PATHSPEC_DIFFERS and rel != ".cursorindexingignore":
                    assert spec.match_file(path) is False and want is True  # the known disagreement
                else:
                    assert spec.match_file(path) == want, (rel, path, "pathspec")
                checked += 1
    assert checked == 7 * len(MATRIX)
    # the canonical rule itself, spot-checked: the matrix is not all one answer
    assert policy.read_rule("a/b/.env") and policy.read_rule("secrets/a/b") and not policy.read_rule(".envrc")
    assert not policy.read_rule("a/config/prod.yaml") and policy.index_rule("a/app.min.js")
    # git's rules for `!`: the last line decides; nothing inside an excluded directory comes back
    assert not policy.read_rule("a/.env.example") and policy.read_rule("secrets/readme")


def test_every_file_carries_the_marker_and_aiexclude_is_never_empty(tmp_path):
    files = compiler.render(_policy(tmp_path), str(tmp_path))
    for rel, text in files.items():
        if rel.endswith((".json",)):
            continue
        assert "generated from owen.policy.toml" in text.splitlines()[0], rel
    empty = _policy(tmp_path, 'version = 1\ntargets = ["aiexclude", "gemini"]\n')
    files = compiler.render(empty, str(tmp_path))
    assert files[".aiexclude"] is None
    assert compiler.write(files, str(tmp_path)) == [".geminiignore", ".sandboy/owned.json"]
    assert not (tmp_path / ".aiexclude").exists()


@pytest.mark.parametrize("text, key, problem", [
    ('version = 1\n[read]\ndney = []\n', "read.dney", "did you mean 'deny'"),
    ('version = 1\ntarget = []\n', "target", "did you mean 'targets'"),
    ('version = 1\n[index]\nexclude = ["!keep.js"]\n', "index.exclude[0]", "re-includes"),
    ('version = 1\n[write]\ndeny = ["!x"]\n', "write.deny[0]", "re-includes"),
    ('version = 1\n[read]\ndeny = ["a/../b"]\n', "read.deny[0]", "'..'"),
    ('version = 1\n[read]\ndeny = ["[ab].env"]\n', "read.deny[0]", "classes"),
    ('version = 1\n[exec]\ndeny = ["rm *"]\n', "exec.deny[0]", "plain words"),
    ('version = 1\n[network]\ndomains = [3]\n', "network.domains[0]", "expected a domain"),
    ('version = 1\ntargets = ["cursr"]\n', "targets[0]", "did you mean 'cursor'"),
    ('version = 1\ntargets = ["cursr"]\n', "targets[0]", "unknown target 'cursr' ("),
    ('version = 1\n[sandboy]\ninclude = ["pyton"]\n', "sandboy.include[0]", "unknown preset 'pyton' (did you mean 'python'"),
    ('version = 1\ntargets = "claude"\n', "targets", "expected a list of target names, got a string"),
    ('version = 1\n[sandboy]\ninclude = [1]\n', "sandboy.include", "expected a list of preset names, got a list"),
    ('version = 1\nread = 3\n', "read", "expected a table [read], got an integer"),
    ('version = 1\n[network]\ndomains = ["exa mple.com"]\n', "network.domains[0]", "exa mple.com"),
    ('version = 2\n', "version", "expected version = 1"),
])
def test_bad_policies_name_file_key_and_problem(tmp_path, text, key, problem):
    (tmp_path / "owen.policy.toml").write_text(text)
    with pytest.raises(PolicyError) as err:
        model.load(str(tmp_path / "owen.policy.toml"))
    assert err.value.key == key and problem in err.value.problem
    run = _cli("compile", cwd=tmp_path)
    assert run.returncode == 2 and f"owen.policy.toml: {key}: " in run.stderr and "Traceback" not in run.stderr


def test_claude_merge_keeps_foreign_keys_and_drops_stale_owned_rules(tmp_path):
    (tmp_path / ".claude").mkdir()
    user = {"model": "opus", "permissions": {"allow": ["Bash(make:*)"], "deny": ["Read(./private.txt)"]},
            "hooks": {"Stop": [{"command": "true"}]}}
    (tmp_path / ".claude/settings.json").write_text(json.dumps(user))
    _policy(tmp_path)
    assert _cli("compile", cwd=tmp_path).returncode == 0
    doc = json.loads((tmp_path / ".claude/settings.json").read_text())
    assert doc["model"] == "opus" and doc["hooks"] == user["hooks"]
    assert "Bash(make:*)" in doc["permissions"]["allow"] and "Read(./private.txt)" in doc["permissions"]["deny"]
    assert {"Read(**/.env)", "Edit(**/.env)", "Bash(git push:*)", "Edit(./Makefile)"} <= set(doc["permissions"]["deny"])
    assert {"Bash(npm run test:*)", "WebFetch(domain:pypi.org)"} <= set(doc["permissions"]["allow"])
    assert doc["sandbox"]["network"]["allowedDomains"] == ["pypi.org"] and doc["sandbox"]["enabled"] is True
    # an older policy's rules do not linger; the user's stay
    _policy(tmp_path, 'version = 1\ntargets = ["claude"]\n[read]\ndeny = ["*.pem"]\n')
    assert _cli("compile", cwd=tmp_path).returncode == 0
    doc = json.loads((tmp_path / ".claude/settings.json").read_text())
    policy_files = ["Edit(./owen.policy.toml)", "Edit(./.sandboy)", "Edit(./.sandboy/**)", "Edit(./.claude)",
                    "Edit(./.claude/**)", "Edit(./.codex)", "Edit(./.codex/**)"]  # always (session 11)
    assert doc["permissions"]["deny"] == ["Read(./private.txt)", "Read(**/*.pem)", "Edit(**/*.pem)",
                                          "Read(**/*.pem/**)", "Edit(**/*.pem/**)", *policy_files]
    assert doc["permissions"]["allow"] == ["Bash(make:*)"] and doc["model"] == "opus"
    assert "network" not in doc["sandbox"] or not doc["sandbox"]["network"].get("allowedDomains")
    assert _cli("check", cwd=tmp_path).returncode == 0


def test_codex_profile_round_trip_keeps_user_tables(tmp_path):
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex/config.toml").write_text('model = "gpt-5"\n[mcp_servers.docs]\ncommand = "docs-mcp"\n')
    _policy(tmp_path)
    assert _cli("compile", cwd=tmp_path).returncode == 0
    doc = tomllib.loads((tmp_path / ".codex/config.toml").read_text())
    assert doc["model"] == "gpt-5" and doc["mcp_servers"]["docs"]["command"] == "docs-mcp"
    assert doc["default_permissions"] == "owen"
    roots = doc["permissions"]["owen"]["filesystem"][":workspace_roots"]
    assert roots["."] == "write" and roots["**/.env"] == "none" and roots["Makefile"] == "read"
    assert doc["permissions"]["owen"]["network"]["domains"] == ["pypi.org"]
    # renaming the profile removes the old one (it was ours), keeps the user's tables
    _policy(tmp_path, POLICY + '[codex]\nprofile = "agents"\n')
    assert _cli("compile", cwd=tmp_path).returncode == 0
    doc = tomllib.loads((tmp_path / ".codex/config.toml").read_text())
    assert set(doc["permissions"]) == {"agents"} and doc["default_permissions"] == "agents"
    assert doc["mcp_servers"]["docs"]["command"] == "docs-mcp"


def test_check_exits_1_with_a_diff_when_a_file_drifted(tmp_path):
    _policy(tmp_path)
    assert _cli("check", cwd=tmp_path).returncode == 1  # nothing compiled yet
    assert _cli("compile", cwd=tmp_path).returncode == 0
    assert _cli("check", cwd=tmp_path).returncode == 0
    with open(tmp_path / ".aiderignore", "a") as fh:
        fh.write("!.env\n")
    run = _cli("check", cwd=tmp_path)
    assert run.returncode == 1 and "-!.env" in run.stdout and "+++ b/.aiderignore" in run.stdout


def test_fidelity_table_reports_losses(tmp_path):
    _policy(tmp_path)
    run = _cli("compile", "--json", cwd=tmp_path)
    rows = json.loads(run.stdout)["fidelity"]
    cell = {(r["key"], r["rule"], r["target"]): r for r in rows}
    assert cell[("read.deny", ".env", "sandboy")]["status"] == "enforced"
    assert cell[("read.deny", ".env", "gemini")]["status"] == "advisory"
    assert cell[("exec.deny", "git push", "cursor")]["status"] == "lost"
    assert cell[("exec.deny", "git push", "sandboy")]["status"] == "lost"
    assert cell[("index.exclude", "build/", "claude")]["status"] == "lost"
    assert cell[("network.domains", "pypi.org", "sandboy")]["status"] == "enforced"
    assert all(r["reason"] for r in rows)
    for target in ("claude", "codex", "sandboy"):
        assert cell[("read.deny", "!.env.example", target)]["status"] == "lost"
        assert "stricter" in cell[("read.deny", "!.env.example", target)]["reason"]
    assert cell[("read.deny", "!.env.example", "aider")]["status"] == "advisory"
    assert len(rows) == 9 * (8 + 3 + 1 + 2 + 1)


def test_explain_names_the_deciding_rule(tmp_path):
    policy = _policy(tmp_path)
    result = explain.explain(policy, "a/b/.env")
    assert result["policy"]["readable"] == (False, "read.deny '.env'")
    assert result["sandboy"]["writable"][0] is False and result["gemini"]["readable"][0] is False
    assert explain.explain(policy, "Makefile")["sandboy"]["writable"] == (False, "fs.protect 'Makefile'")
    run = _cli("explain", "src/main.py", cwd=tmp_path)
    assert run.returncode == 0 and "readable   yes" in run.stdout


# --- real enforcement: the generated step policy under `sandboy run` ----------------------------

def _caged(repo, script):
    return subprocess.run([*SANDBOY, "run", "--policy", ".sandboy/agent.toml", "--", "/bin/sh", "-c", script],
                          cwd=repo, capture_output=True, text=True, timeout=120)


@pytest.fixture
def repo(tmp_path):
    (tmp_path / ".env").write_text("SECRET=hunter2\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src/main.py").write_text("print('ok')\n")
    (tmp_path / "Makefile").write_text("all:\n")
    _policy(tmp_path, POLICY.replace('domains = ["pypi.org"]', "domains = []"))
    assert _cli("compile", cwd=tmp_path).returncode == 0
    return tmp_path


def test_generated_policy_denies_secrets_and_allows_the_rest(repo):
    denied = _caged(repo, "cat .env")
    assert denied.returncode != 0 and "hunter2" not in denied.stdout
    allowed = _caged(repo, "cat src/main.py")
    assert allowed.returncode == 0 and allowed.stdout == "print('ok')\n", allowed.stderr


def test_generated_policy_refuses_denied_writes_and_allows_others(repo):
    bad = _caged(repo, "echo evil > Makefile; echo evil > .env; echo evil > owen.policy.toml")
    assert bad.returncode != 0
    assert (repo / "Makefile").read_text() == "all:\n" and (repo / ".env").read_text() == "SECRET=hunter2\n"
    assert "evil" not in (repo / "owen.policy.toml").read_text()
    good = _caged(repo, "echo fine > src/new.txt")
    assert good.returncode == 0, good.stderr
    assert (repo / "src/new.txt").read_bytes() == b"fine\n"


def test_generated_policy_refuses_a_domain_it_does_not_list(tmp_path):
    _policy(tmp_path)
    assert _cli("compile", cwd=tmp_path).returncode == 0
    run = _caged(tmp_path, "/usr/bin/python3 -c \"import urllib.request as u; u.urlopen('http://denied.example/', timeout=20)\"")
    assert run.returncode != 0
    assert "403" in run.stderr or "Forbidden" in run.stderr or "refused" in run.stderr.lower(), run.stderr


def test_a_dropped_target_is_cleaned_up_and_the_users_entries_stay(tmp_path):
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude/settings.json").write_text(json.dumps({"permissions": {"deny": ["Read(./mine)"]}}))
    _policy(tmp_path)
    assert _cli("compile", cwd=tmp_path).returncode == 0
    (tmp_path / ".notes.txt").write_text("a file of the user's\n")
    _policy(tmp_path, 'version = 1\ntargets = ["gemini", "aiexclude"]\n')  # aiexclude would be empty now
    run = _cli("compile", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    removed = json.loads(run.stdout)["removed"]
    assert {".aiexclude", ".aiderignore", ".cursorignore", ".sandboy/agent.toml"} <= set(removed)
    assert not (tmp_path / ".aiexclude").exists() and (tmp_path / ".notes.txt").exists()
    assert json.loads((tmp_path / ".claude/settings.json").read_text()) == {"permissions": {"deny": ["Read(./mine)"]}}
    assert "permissions" not in tomllib.loads((tmp_path / ".codex/config.toml").read_text())
    assert _cli("check", cwd=tmp_path).returncode == 0
    # a hand-edited ignore file (marker gone) is the user's now: never removed
    _policy(tmp_path, 'version = 1\ntargets = ["aider"]\n[read]\ndeny = [".env"]\n')
    assert _cli("compile", cwd=tmp_path).returncode == 0
    (tmp_path / ".aiderignore").write_text("mine\n")
    _policy(tmp_path, 'version = 1\ntargets = ["gemini"]\n')
    assert _cli("compile", cwd=tmp_path).returncode == 0
    assert (tmp_path / ".aiderignore").read_text() == "mine\n"


def test_a_re_included_path_stays_denied_in_the_cage(repo):
    # the fidelity table says "lost (stricter)": check that it is so
    (repo / ".env.example").write_text("EXAMPLE=1\n")
    run = _caged(repo, "cat .env.example")
    assert run.returncode != 0 and "EXAMPLE" not in run.stdout


def test_compile_never_follows_a_symlink_out_of_the_repository(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".claude").symlink_to(outside)  # a hostile repository's .claude -> somewhere of the user's
    (repo / ".aiderignore").symlink_to(outside / "victim")
    (outside / "victim").write_text("precious\n")
    _policy(repo)
    run = _cli("compile", cwd=repo)
    assert run.returncode == 2 and "symlink" in run.stderr and "Traceback" not in run.stderr
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]
    assert (outside / "victim").read_text() == "precious\n"


def test_a_hand_edited_owned_record_cannot_crash_compile(tmp_path):
    _policy(tmp_path)
    (tmp_path / ".sandboy").mkdir()
    (tmp_path / ".sandboy/owned.json").write_text('{".claude/settings.json": {"permissions.deny": [[1]]}, "files": 3}')
    run = _cli("compile", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert _cli("check", cwd=tmp_path).returncode == 0


def test_codex_warns_when_older_sandbox_settings_override_the_profile(tmp_path):
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex/config.toml").write_text('sandbox_mode = "workspace-write"\n')
    _policy(tmp_path)
    run = _cli("compile", "--json", cwd=tmp_path)
    assert run.returncode == 0
    assert any("IGNORES the permission profile" in w for w in json.loads(run.stdout)["warnings"])


def test_names_returns_the_list_or_names_the_bad_entry():
    assert model._names("p.toml", "k", ["a", "b"], ("a", "b", "c"), "thing") == ["a", "b"]
    with pytest.raises(PolicyError) as err:
        model._names("p.toml", "k", ["a", "bb"], ("a", "b"), "thing")
    assert (err.value.key, err.value.problem) == ("k[1]", "unknown thing 'bb' (did you mean 'b'? expected one of: a, b)")
    with pytest.raises(PolicyError) as err:
        model._names("p.toml", "k", ("a",), ("a",), "thing")  # a TOML list is a list, nothing else
    assert (err.value.key, err.value.problem) == ("k", "expected a list of thing names, got tuple")
