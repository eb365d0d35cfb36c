"""The operator's ceiling: the most any gate step may do (docs/design.md, "Gate").

`--ceiling FILE` is an ordinary step policy written by the operator. Without it the built-in
ceiling below applies: the system read-only, the repository and a per-run `{tmp}` writable, no
network, no raw `/dev` (only null, zero, full, random, urandom), never `$HOME`, `/root`, `/var` or
`/tmp` as a whole, none of the host secrets that live under `/etc` (readable by root otherwise:
steps run as whoever runs the gate), and the protected paths of the repository (`.git/config`,
`.git/hooks`, ...: `fs.protect_defaults`) read-only.

The ceiling file may hold one table no step policy has: `[gate]`, what bounds the gate as a whole
rather than each step — `budget`, the wall time all its steps together may take (`sandboy.budget`;
six hours when absent). It is read here and never reaches the Policy (`sandboy run` with such a
file refuses the unknown table).
"""

from __future__ import annotations

from sandboy.policy.model import Policy
from sandboy.policy.presets import ETC_SECRETS  # host secrets under /etc: one list, shared with `system`

BUILTIN_SOURCE = "<built-in ceiling>"

# Limits: generous for a test suite, tight enough that a fork bomb or a runaway writer stops.
# wall_seconds bounds a step that sets no timeout of its own; a step may only lower these.
BUILTIN_LIMITS = {
    "wall_seconds": 3600,    # one hour
    "processes": 512,        # counted per step (pids cgroup when run as root)
    "open_files": 4096,
    "file_size_mib": 4096,   # largest single file a step may write
    # memory_mib: set by builtin() from this host's RAM (cgroup.memory_default_mib: half of it,
    # at most 16 GiB) — the step's processes together, in a memory cgroup (ADR 0027)
}

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"

BUILTIN = {
    "version": 1,
    "fs": {
        # No `/dev`: reading it opened raw block devices (a secret read straight off a loop
        # device) and other terminals of the same user (issue #7). Every cage grants the
        # minimal device set itself (`landlock.DEVICE_GRANTS`: null, zero, full, random,
        # urandom); a private pts and shm come with the namespace tier's own /dev.
        "read": ["/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/proc", "{repo}"],
        # The ELF interpreter is added by the cage itself; lib dirs hold helper executables
        # (e.g. /usr/lib/git-core). Exec lists are a speed bump, not a boundary (docs/findings.md).
        "exec": ["/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/lib", "/lib", "/lib64",
                 "/usr/libexec"],
        "write": ["{repo}", "{tmp}"],
        "deny": list(ETC_SECRETS),
    },
    "net": {},
    # PATH is set, not passed: the host's PATH may start with directories the step cannot
    # execute from (~/.local/bin, pyenv shims), where bash stops at EACCES instead of going on.
    # HOME is the step's private, writable, empty {tmp}, not the operator's home (which the step
    # cannot read): `bash -l`, git and pip then start cleanly and write their dot-files there.
    "env": {"pass": ["LANG", "LC_ALL", "TERM", "TZ"], "set": {"PATH": SYSTEM_PATH, "HOME": "{tmp}", "CI": "true"}},
    "limits": dict(BUILTIN_LIMITS),
}


def _copied(value):
    """A deep copy of `BUILTIN`'s dicts, lists and scalars (without the `copy` module's import)."""
    if isinstance(value, dict):
        return {key: _copied(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copied(item) for item in value]
    return value


def builtin() -> Policy:
    import os

    from sandboy.confine.cgroup import memory_default_mib

    data = _copied(BUILTIN)
    data["limits"]["memory_mib"] = memory_default_mib()
    # Only system paths that exist on this host (e.g. /lib64 or /usr/libexec may be absent).
    for key in ("read", "exec"):
        data["fs"][key] = [p for p in data["fs"][key] if p.startswith("{") or os.path.exists(p)]
    return Policy.from_mapping(data, BUILTIN_SOURCE)


GATE_KEYS = ("budget",)


def load(path) -> Policy:
    """The ceiling from `--ceiling FILE`, or the built-in one when `path` is None."""
    return read(path)[0]


def read(path) -> tuple:
    """(the ceiling policy, the gate's time budget in seconds — 0: none, None: the file sets
    none) from `--ceiling FILE` (its `[gate]` table), or the built-in policy when `path` is None."""
    if path is None:
        return builtin(), None
    import os

    from sandboy.policy.load import parse_cached, read_bounded, validate

    path = os.fspath(path)

    def check(data) -> None:  # before a fresh parse is cached: never cache a bad file
        validate(_policy_part(data), path)
        _budget(path, data)

    data = parse_cached(path, read_bounded(path), check)
    # (a cached table is validated again, like every policy's: policy/load.py)
    return Policy.from_mapping(_policy_part(data), path), _budget(path, data)


def _budget(path: str, data: dict):
    from sandboy import budget
    from sandboy.policy.load import checked_table

    table = checked_table(path, "gate", data.get("gate", {}), GATE_KEYS)
    return budget.parse(path, "gate.budget", table["budget"]) if "budget" in table else None


def _policy_part(data):
    """The file's table without `[gate]`: what is a step policy."""
    return {key: value for key, value in data.items() if key != "gate"} if isinstance(data, dict) else data


def printed() -> dict:
    """The built-in ceiling as `--print-ceiling` writes it: the policy and the gate's budget."""
    from sandboy import budget
    from sandboy.confine.cgroup import memory_default_mib

    # this host's default memory bound, written out: a ceiling file started from it keeps one
    return {**BUILTIN, "limits": {**BUILTIN["limits"], "memory_mib": memory_default_mib()},
            "gate": {"budget": budget.text(budget.DEFAULT_SECONDS)}}


def to_toml(data: dict) -> str:
    """A ceiling mapping (shaped like `BUILTIN`) as TOML text: a starting point for `--ceiling`."""
    import json

    # JSON strings, numbers, booleans and arrays of them are valid TOML values.
    lines = [f"version = {data.get('version', 1)}"]
    for section, table in data.items():
        if section == "version":
            continue
        lines.append(f"\n[{section}]")
        for key, value in table.items():
            if isinstance(value, dict):
                inner = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in value.items())
                lines.append(f"{key} = {{ {inner} }}" if inner else f"{key} = {{}}")
            else:
                lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"
