"""Host-side git helpers for the probes that plant code for the operator's next git command
(test_redteam_tier.py, test_git_planted.py, test_gitcheck*.py, test_hook_python.py). A unique module name, like cagekit."""

from __future__ import annotations

import os
import subprocess
import sys

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


def manager_env(home) -> dict:
    """`scratch_env(home)` for the operator's hook managers (pre-commit, lefthook: the test
    extras, beside this interpreter) first on PATH, pre-commit's cache in the scratch home."""
    environ = scratch_env(home)
    environ["PATH"] = f"{os.path.dirname(sys.executable)}:{environ['PATH']}"
    environ["PRE_COMMIT_HOME"] = str(home / ".cache" / "pre-commit")
    return environ


def sh(script, cwd, env) -> None:
    subprocess.run(["/bin/sh", "-ec", script], cwd=cwd, env=env, check=True, capture_output=True, timeout=120)


def whole_second_image(path) -> None:
    """A 16 MiB ext4 image at `path` whose inodes are 128 bytes: its timestamps are whole seconds
    (what the git check's probes on such file systems loop-mount). Skips the test where mkfs.ext4
    cannot make one."""
    import pytest

    with open(path, "wb") as fh:
        fh.truncate(16 << 20)
    made = subprocess.run(["mkfs.ext4", "-q", "-I", "128", "-F", str(path)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"mkfs.ext4 -I 128: {made.stderr.strip()}")


def git_repo(path, env):
    """A repository with one commit at `path`, made with `env` (see `scratch_env`)."""
    sh(f"git init -q '{path}' && git -C '{path}' commit -q --allow-empty -m init", path.parent, env)
    return path


# husky 9.1.7's runner `h`, copied byte for byte from the npm package (https://github.com/typicode/husky,
# MIT licence, Copyright (c) 2021 typicode), and what its installer (index.js) writes: git runs
# `.husky/_/<hook>`, which sources `_/h`, which runs `sh -e .husky/<hook>`.
HUSKY_H = r'''#!/usr/bin/env sh
[ "$HUSKY" = "2" ] && set -x
n=$(basename "$0")
s=$(dirname "$(dirname "$0")")/$n

[ ! -f "$s" ] && exit 0

if [ -f "$HOME/.huskyrc" ]; then
	echo "husky - '~/.huskyrc' is DEPRECATED, please move your code to ~/.config/husky/init.sh"
fi
i="${XDG_CONFIG_HOME:-$HOME/.config}/husky/init.sh"
[ -f "$i" ] && . "$i"

[ "${HUSKY-}" = "0" ] && exit 0

export PATH="node_modules/.bin:$PATH"
sh -e "$s" "$@"
c=$?

[ $c != 0 ] && echo "husky - $n script failed (code $c)"
[ $c = 127 ] && echo "husky - command not found in PATH=$PATH"
exit $c
'''
HUSKY_HOOKS = ("pre-commit", "pre-merge-commit", "prepare-commit-msg", "commit-msg", "post-commit", "applypatch-msg",
               "pre-applypatch", "post-applypatch", "pre-rebase", "post-rewrite", "post-checkout", "post-merge",
               "pre-push", "pre-auto-gc")


def husky_install(repo, env=None) -> None:
    """What `npx husky` (9.1.7, index.js) does in `repo`, without npm: `core.hooksPath = .husky/_`,
    the runner `h` (mode 0644, as copyFileSync leaves it) and one stub per hook (0755)."""
    subprocess.run(["git", "-C", str(repo), "config", "core.hooksPath", ".husky/_"], check=True, env=env)
    hooks = os.path.join(str(repo), ".husky", "_")
    os.makedirs(hooks, exist_ok=True)
    with open(os.path.join(hooks, ".gitignore"), "w") as fh:
        fh.write("*")
    with open(os.path.join(hooks, "h"), "w") as fh:
        fh.write(HUSKY_H)
    for name in HUSKY_HOOKS:
        path = os.path.join(hooks, name)
        with open(path, "w") as fh:
            fh.write('#!/usr/bin/env sh\n. "$(dirname "$0")/h"')
        os.chmod(path, 0o755)


def snapshot(repo, env):
    """The git check's launch snapshot of `repo` (`gitcheck.snapshot`), taken a clock tick after the
    set-up (see test_gitcheck.check): else the check after the run rightly takes the set-up's own
    files for ones the run wrote."""
    import time

    from sandboy.confine import gitcheck

    time.sleep(0.02)
    return gitcheck.snapshot([str(repo)], home=env["HOME"])


def operators_commit(repo, env, message):
    """The operator's next commit of a change of theirs (lefthook skips a commit with nothing
    staged): what runs the hooks a command may have planted."""
    (repo / f"{message}.txt").write_text(message)
    subprocess.run(["git", "add", f"{message}.txt"], cwd=repo, env=env, check=True, timeout=30)
    return subprocess.run(["git", "-c", "safe.directory=*", "commit", "-q", "-m", message],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=120)
