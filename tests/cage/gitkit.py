"""Host-side git helpers for the probes that plant code for the operator's next git command
(test_redteam_tier.py, test_git_planted.py, test_gitcheck.py, test_gitcheck_attacks.py). A unique module name, like cagekit."""

from __future__ import annotations

import os
import subprocess

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_CONFIG_NOSYSTEM": "1"}


def host_repo(path) -> None:
    """A repository with one commit, made by the host's git."""
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run(["git", "-C", str(path), "commit", "-q", "--allow-empty", "-m", "init"], check=True,
                   env={**os.environ, **GIT_ENV})


def host_git_status(repo) -> None:
    """The operator's next git command in the repository, as the host runs it."""
    subprocess.run(["git", "-c", "safe.directory=*", "-C", str(repo), "status"], capture_output=True,
                   env={**os.environ, **GIT_ENV}, timeout=30)


def fsmonitor(marker) -> str:
    """A config section (printf escapes) whose core.fsmonitor touches `marker` when git runs it."""
    return f'[core]\\n\\tfsmonitor = "touch {marker}; false"\\n'


def scratch_env(home) -> dict:
    """A minimal environment for the host's git in a test: its own HOME, no system config."""
    home.mkdir(exist_ok=True)
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), **GIT_ENV}


def sh(script, cwd, env) -> None:
    subprocess.run(["/bin/sh", "-ec", script], cwd=cwd, env=env, check=True, capture_output=True, timeout=120)


def git_repo(path, env):
    """A repository with one commit at `path`, made with `env` (see `scratch_env`)."""
    sh(f"git init -q '{path}' && git -C '{path}' commit -q --allow-empty -m init", path.parent, env)
    return path
