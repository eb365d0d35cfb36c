"""Red team, session 13 (hostile input): `net.domains` wildcards over a public suffix.

`*.com` (or `*.io`, `*.co.uk`) in an allow list was taken silently — an open item since session 8:
every host anyone can register under the suffix was allowed, so the egress rules stopped no
exfiltration at all while the policy read as a list of domains. Refused at load now (exit 2,
naming the file, the key and the fix), in `sandboy run`'s policy, a gate step's and the
capability policy the agents' files are compiled from. Twins: an organisation's wildcard, the
special-use TLDs (`*.test`, `*.corp`) and a broad DENY entry still load. Real CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SANDBOY = [sys.executable, "-m", "sandboy"]


def _run_dry(tmp_path, net: str) -> subprocess.CompletedProcess:
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr"]\n[net]\n' + net)
    return subprocess.run([*SANDBOY, "run", "--policy", str(policy), "--dry-run", "--json", "--", "true"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)


@pytest.mark.parametrize("entry", ["*.com", "*.io", "*.COM", "*.org:443", "*.co.uk", "*.com.au", "*.net.br:8443"])
def test_a_wildcard_over_a_public_suffix_is_refused_naming_the_fix(tmp_path, entry):
    done = _run_dry(tmp_path, f'domains = ["pypi.org", "{entry}"]\n')
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert "p.toml" in done.stderr and "net.domains[1]" in done.stderr, done.stderr
    assert "net.unrestricted = true" in done.stderr and "list the hosts" in done.stderr


@pytest.mark.parametrize("net", [
    'domains = ["*.pythonhosted.org", "*.example.com:8443", "*.test", "*.corp", "*.co.example", "*.uk", "x.co.uk"]'
    .replace('"*.uk", ', ''),
    'domains = ["pypi.org"]\ndomains_deny = ["*.com", "*.co.uk"]',
])
def test_twin_an_organisations_wildcard_and_a_broad_deny_still_load(tmp_path, net):
    done = _run_dry(tmp_path, net + "\n")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert "pypi.org" in json.dumps(shown) or "pythonhosted.org" in json.dumps(shown)


def test_a_gate_step_asking_for_a_public_suffix_wildcard_is_refused(tmp_path):
    """The repository's side: a step policy in .007/ (its ceiling would have to allow it too)."""
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    (repo / ".007" / "gate.toml").write_text('[[step]]\nname = "fetch"\nrun = "true"\npolicy = "fetch.toml"\n')
    (repo / ".007" / "fetch.toml").write_text('version = 1\n[net]\ndomains = ["*.io"]\n')
    done = subprocess.run([*SANDBOY, "gate"], capture_output=True, text=True, timeout=120, cwd=repo)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "fetch.toml" in done.stderr and "net.domains[0]" in done.stderr and "Traceback" not in done.stderr


def test_the_capability_policy_cannot_hand_agents_a_public_suffix_wildcard(tmp_path):
    """`network.domains` becomes Claude Code's and Codex's allowed domains: the same refusal."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "owen.policy.toml").write_text('version = 1\ntargets = ["claude"]\n[network]\ndomains = ["*.com"]\n')
    env = {**os.environ, "HOME": str(tmp_path)}
    done = subprocess.run([*SANDBOY, "policy", "compile"], capture_output=True, text=True, timeout=120, cwd=repo,
                          env=env)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "network.domains[0]" in done.stderr and "Traceback" not in done.stderr
    assert not (repo / ".claude").exists()
    (repo / "owen.policy.toml").write_text('version = 1\ntargets = ["claude"]\n[network]\ndomains = ["*.github.com"]\n')
    twin = subprocess.run([*SANDBOY, "policy", "compile"], capture_output=True, text=True, timeout=120, cwd=repo,
                          env=env)
    assert twin.returncode == 0, twin.stderr
    assert "*.github.com" in (repo / ".claude" / "settings.json").read_text()


def test_the_fidelity_table_says_claude_code_allows_every_port_of_a_bare_domain(tmp_path):
    """Session 13: `network.domains = ["pypi.org"]` means ports 80 and 443 to the cage, but Claude
    Code's sandbox matches the host alone (sandbox-runtime's filter, source read): the agent's file
    allowed pypi.org:22 and every other port while compile called the row "advisory" and said
    nothing of it. The table now says so; a `host:port` entry is named as such (twin: the cage's
    row is unchanged)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "owen.policy.toml").write_text('version = 1\ntargets = ["claude", "sandboy"]\n[network]\n'
                                           'domains = ["pypi.org", "files.example.com:8443"]\n')
    done = subprocess.run([*SANDBOY, "policy", "compile"], capture_output=True, text=True, timeout=120, cwd=repo,
                          env={**os.environ, "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    rows = done.stdout.split("network.domains = ")
    bare = next(r for r in rows if r.startswith("pypi.org"))
    ported = next(r for r in rows if r.startswith("files.example.com:8443"))
    claude_bare = next(line for line in bare.splitlines() if line.strip().startswith("claude"))
    assert "every port of the host" in claude_bare and "80 and 443" in claude_bare
    assert "host:port" in next(line for line in ported.splitlines() if line.strip().startswith("claude"))
    assert "every port" not in next(line for line in bare.splitlines() if line.strip().startswith("sandboy"))
