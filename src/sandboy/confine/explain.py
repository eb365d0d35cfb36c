"""Why a command cannot be executed under a policy, in words a user can act on.

Landlock checks execute rights on the file a path finally resolves to, so a venv's `python`
(a symlink into pyenv, /usr or /opt) or a script whose `#!` interpreter lives elsewhere fails
with a bare EACCES — 126 and "Permission denied", and with a PATH search the next match runs
instead, silently. These helpers name the path, the symlink target and the `fs.exec` entry (or
preset) that would allow it. They only stat, readlink and read a first line: they work inside the
cage too, after an exec failed (import this module before the cage is applied).
"""

import os

from sandboy.confine._libc import path_candidates
from sandboy.paths import is_within_any

INTERPRETERS = ("python", "pip", "pytest", "node", "npm", "npx", "perl", "ruby")
_PRESET_FOR = {"python": "python", "pip": "python", "pytest": "python", "node": "node", "npm": "node",
               "npx": "node", "git": "git"}


def _shebang(path: str) -> list[str]:
    try:
        with open(path, "rb") as fh:
            first = fh.read(256)
    except OSError:
        return []
    if not first.startswith(b"#!"):
        return []
    return first[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()


def _preset_hint(*names: str) -> str:
    for name in names:
        base = os.path.basename(name)
        for prefix, preset in _PRESET_FOR.items():
            if base.startswith(prefix):
                return f' (or include = ["{preset}"] in the policy)'
    return ""


def why_not(path: str, roots, path_var: str | None = None, depth: int = 0) -> str:
    """"" when `path` (an existing file) can be executed under `roots`, else the reason."""
    real = os.path.realpath(path)
    via = f" (a symlink to {real})" if real != os.path.abspath(path) else ""
    if not is_within_any(real, roots):
        return (f"{path}{via}: {os.path.dirname(real)} is not in fs.exec; add \"{os.path.dirname(real)}\" "
                f"to fs.exec{_preset_hint(path, real)}")
    words = _shebang(real)
    if words and depth < 4:
        interpreter = words[0]
        if os.path.basename(interpreter) == "env" and len(words) > 1:
            found = [c for c in path_candidates(words[1], path_var) if os.path.isfile(c)]
            if not found:
                return ""
            interpreter = found[0]
        if os.path.isfile(interpreter):
            reason = why_not(interpreter, roots, path_var, depth + 1)
            if reason:
                return f"{path}{via} is a script for {reason}"
    return ""


def not_executable(argv0: str, cage) -> str:
    """The reason for a 126 (EACCES) on `argv0`, or "" when none is found."""
    try:
        roots = cage.exec_roots
        path_var = cage.env.get("PATH")
        for candidate in path_candidates(argv0, path_var):
            if os.path.isfile(candidate):
                reason = why_not(candidate, roots, path_var)
                if reason:
                    return reason
    except OSError:
        return ""
    return ""


def skipped(argv0: str, cage) -> str:
    """When PATH has `argv0` in a place the cage refuses AND a later one it allows, execvp runs the
    later one without a word: say so (e.g. a venv's `pip` skipped for /usr/bin/pip)."""
    if "/" in argv0:
        return ""
    roots = cage.exec_roots
    path_var = cage.env.get("PATH")
    refused = []
    for candidate in path_candidates(argv0, path_var):
        if not os.path.isfile(candidate) or not os.access(candidate, os.X_OK):
            continue
        reason = why_not(candidate, roots, path_var)
        if not reason:
            if refused:
                return f"{argv0}: runs {candidate}, not {refused[0]}"
            return ""
        refused.append(reason)
    return ""


def path_warnings(cage) -> list[str]:
    """For --dry-run: PATH entries the cage cannot execute from, and interpreter symlinks in the
    ones it can whose targets it cannot."""
    roots = cage.exec_roots
    path_var = cage.env.get("PATH")
    out = []
    for directory in dict.fromkeys((path_var or "").split(":")):
        if not directory or not os.path.isdir(directory):
            continue
        if not is_within_any(os.path.realpath(directory), roots):
            out.append(f"PATH entry {directory} is not in fs.exec: commands found there fail with 126 "
                       "(or a later PATH entry's runs instead)")
            continue
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            if not name.startswith(INTERPRETERS):
                continue
            path = os.path.join(directory, name)
            if os.path.islink(path) and os.path.exists(path):
                reason = why_not(path, roots, path_var)
                if reason:
                    out.append(f"interpreter {reason}")
    return out
