"""Parse and validate `.007/gate.toml`, a file written by the untrusted repository.

Everything is checked before any step runs; a bad gate is a `PolicyError` (exit 2) reading
`FILE: key: problem`. Policy files a step names are read here too, once, so that a step cannot
rewrite the policy of a later one.
"""

from __future__ import annotations

import os

from sandboy import escape
from sandboy.errors import PolicyError
from sandboy.policy.load import MAX_POLICY_BYTES, kind_of, checked_table, parse_cached
from sandboy.policy.model import Policy
from sandboy.repository_files import read_inside, read_resolved, resolve_inside

GATE_DIR = ".007"
GATE_FILE = "gate.toml"
DEFAULT_SHELL = ("bash", "-lc")
MAX_STEPS = 1000
# Entries (list items: fs paths, domains, env names, syscalls...) and text in the steps' policies,
# counted once for EACH step that uses them: each entry is resolved (symlinks followed), met with
# the ceiling, reported and kept in every report for every step. A 1 MiB policy of 100,000
# symlinks to `/` named by a step cost 11 s, 20 MB of console, 27 MB of JSON, 20 MB of JUnit and
# ~160 MB of the gate's memory per step; one of 38,000 env.set names and 10,000 domains 2.3 MB of
# JSON and 10,000 narrowings per step: named by 1,000 steps of a 60 kB gate.toml, that was hours
# and ~160 GB (session 7). One such policy used once still fits.
MAX_GATE_POLICY_ENTRIES = 100_000
MAX_GATE_POLICY_TEXT = 32 << 20  # characters of those entries (an env.set value may be long)
# Bytes of all the step policy FILES a gate reads, each file once: they are read, parsed and
# validated before the operator's time budget starts, and comments weigh nothing against the
# entries above — 200 files of 1 MiB of comments (git stores them as one small blob) held the
# gate 13 s before its first step under `--budget 1`, 1,000 about a minute (session 9).
MAX_GATE_POLICY_FILE_BYTES = 32 << 20
MAX_NAME = 64
MAX_RUN = 65536
MAX_TIMEOUT = 7 * 24 * 3600
_MAX_DIGITS = 16  # of a timeout string: "604800s" is 7
_UNITS = {"s": 1, "m": 60, "h": 3600}
_TOP_KEYS = ("gate", "step", "policy")
_GATE_KEYS = ("shell",)
_STEP_KEYS = ("name", "run", "policy", "timeout", "allow_failure")
_FS_PATH_KEYS = ("read", "exec", "write", "deny", "protect")


class _PolicyFiles(dict):
    """The step policy files read so far, by the path each was read from, and their bytes."""

    bytes_read = 0


class Step:
    __slots__ = ("name", "run", "policy_ref", "policy", "timeout", "allow_failure")

    def __init__(self, name: str, run: str, policy_ref, policy, timeout, allow_failure: bool):
        self.name = name
        self.run = run
        self.policy_ref = policy_ref  # as written: None, a table name or a path under .007/
        self.policy = policy          # Policy or None (= the ceiling)
        self.timeout = timeout        # seconds or None
        self.allow_failure = allow_failure


class Gate:
    __slots__ = ("repo", "path", "shell", "steps")

    def __init__(self, repo: str, path: str, shell: tuple, steps: list):
        self.repo = repo
        self.path = path
        self.shell = shell
        self.steps = steps


def parse_timeout(src: str, key: str, value) -> int:
    """Seconds from `90`, `"90s"`, `"10m"` or `"1h"`."""
    if type(value) is int:
        seconds = value
    elif isinstance(value, str) and len(value) >= 2 and value[-1] in _UNITS and value[:-1].isascii() \
            and value[:-1].isdigit():
        # more digits than any timeout has: out of range below, without int() of 5,000 digits
        # (a ValueError traceback and exit 1 — "a step failed" — instead of exit 2; session 9)
        seconds = int(value[:-1]) * _UNITS[value[-1]] if len(value) <= _MAX_DIGITS else MAX_TIMEOUT + 1
    else:
        raise PolicyError(src, key, f"expected seconds as an integer or a string like \"90s\", \"10m\", \"1h\"; "
                          f"got {value!r}" if isinstance(value, (str, int)) else
                          f"expected seconds as an integer or a string like \"10m\", got {kind_of(value)}")
    if not 0 < seconds <= MAX_TIMEOUT:
        raise PolicyError(src, key, f"expected a timeout between 1 second and 7 days, got {value!r:.60}")
    return seconds


def _check_name(src: str, key: str, name) -> str:
    if not isinstance(name, str):
        raise PolicyError(src, key, f"expected a string, got {kind_of(name)}")
    if not name or len(name) > MAX_NAME:
        raise PolicyError(src, key, f"expected 1 to {MAX_NAME} characters, got {len(name)}")
    if not name.isprintable() or name != name.strip():
        raise PolicyError(src, key, f"expected printable characters without leading/trailing space: {name!r}")
    return name


def _shell(src: str, gate) -> tuple:
    checked_table(src, "gate", gate, _GATE_KEYS)
    shell = gate.get("shell", list(DEFAULT_SHELL))
    if not isinstance(shell, list) or not shell:
        raise PolicyError(src, "gate.shell", f"expected a non-empty list of strings like [\"bash\", \"-lc\"], "
                          f"got {kind_of(shell)}")
    for i, part in enumerate(shell):
        if not isinstance(part, str) or not part or "\0" in part:
            raise PolicyError(src, f"gate.shell[{i}]", f"expected a non-empty string, got {part!r}")
    return tuple(shell)


def _no_parent_after_placeholder(policy) -> tuple | None:
    """(key, problem) for the first fs path of a step policy with a `..` component after a
    placeholder, else None. `{tmp}/../x` is kept unresolved while the step's policy is met with
    the ceiling (`{tmp}` is made per step), and normalising it dropped the placeholder: it named
    `x` relative to the working directory, not a directory beside `{tmp}`; `{repo}/..`, `{home}/..`
    name what the placeholder was chosen to avoid naming. No step needs it: `{repo}/sub` or an
    absolute path says the same plainly (and the ceiling still decides)."""
    fs = policy.fs
    for field in _FS_PATH_KEYS:
        for i, path in enumerate(getattr(fs, field)):
            parts = path.split("/")
            first = next((n for n, part in enumerate(parts) if "{" in part), None)
            if first is not None and ".." in parts[first + 1:]:
                return (f"fs.{field}[{i}]", f"{path!r}: '..' after a placeholder is refused in a step policy "
                        "(it would name a path the placeholder does not stand for); write the directory "
                        "plainly, e.g. \"{repo}/sub\" or an absolute path")
    return None


def _policy_tables(src: str, tables) -> dict:
    if not isinstance(tables, dict):
        raise PolicyError(src, "policy", f"expected tables [policy.NAME], got {kind_of(tables)}")
    out = {}
    for name, table in tables.items():
        key = f"policy.{escape.key(name)}"
        if not isinstance(table, dict):
            raise PolicyError(src, key, f"expected a table [{key}], got {kind_of(table)}")
        try:
            out[name] = Policy.from_mapping(table, f"{src} [{key}]")
        except PolicyError as exc:
            raise PolicyError(src, f"{key}.{exc.key}" if exc.key else key, exc.problem) from None
        upward = _no_parent_after_placeholder(out[name])
        if upward:
            raise PolicyError(src, f"{key}.{upward[0]}", upward[1])
    return out


def _policy_file(src: str, key: str, repo: str, ref: str, files: _PolicyFiles) -> Policy:
    """A policy path relative to .007/, looked up strictly inside the repository (symlinks
    followed only while they stay in it: repository_files). `files`: the policies read so far,
    by the path each was read from — one file under many spellings ("p.toml", "./p.toml",
    ".//p.toml", a link) is read and validated once: 500 spellings of one 1 MiB policy took
    39 s before any step ran."""
    if "\0" in ref:
        raise PolicyError(src, key, f"{ref!r} holds a NUL byte: name a file under {GATE_DIR}/")
    if ref.startswith("/"):
        raise PolicyError(src, key, f"{ref!r} must be a path relative to {GATE_DIR}/, not absolute")
    if ".." in ref.split("/"):
        raise PolicyError(src, key, f"{ref!r} must not contain '..': policy files live inside the repository")
    path = resolve_inside(repo, f"{GATE_DIR}/{ref}", src, key)
    if path in files:
        return files[path]
    found = read_resolved(path, f"{GATE_DIR}/{ref}", MAX_POLICY_BYTES, src, key)
    if found is None:
        raise PolicyError(src, key, f"cannot read {ref!r}: no such file under {GATE_DIR}/")
    real, raw = found
    files.bytes_read += len(raw)
    if files.bytes_read > MAX_GATE_POLICY_FILE_BYTES:
        raise PolicyError(src, key, f"the step policy files named so far hold {files.bytes_read:,} bytes; at most "
                          f"{MAX_GATE_POLICY_FILE_BYTES:,} in a gate (each file counted once): they are all read "
                          "and parsed before any step runs; share fewer, smaller policy files between steps")
    try:
        made = []  # as the gate file: cached once valid, validated again when it comes from the cache
        data = parse_cached(real, raw, lambda parsed: made.append(Policy.from_mapping(parsed, real)))
        policy = made[0] if made else Policy.from_mapping(data, real)
    except PolicyError as exc:
        raise PolicyError(src, f"{key} ({ref!r})", f"{exc.key}: {exc.problem}" if exc.key else exc.problem) from None
    upward = _no_parent_after_placeholder(policy)
    if upward:
        raise PolicyError(src, f"{key} ({ref!r})", f"{upward[0]}: {upward[1]}")
    files[path] = policy
    return policy


def _step(src: str, i: int, table, tables: dict, repo: str, files: dict) -> Step:
    prefix = f"step[{i}]"
    if not isinstance(table, dict):
        raise PolicyError(src, prefix, f"expected a [[step]] table, got {kind_of(table)}")
    name = table.get("name")
    if isinstance(name, str) and 0 < len(name) <= MAX_NAME:  # errors name the step when it has a sane name
        prefix = f"step[{i}] ({name!r})"
    checked_table(src, prefix, table, _STEP_KEYS)  # a table: checked above, with the gate's own words
    for required in ("name", "run"):
        if required not in table:
            raise PolicyError(src, f"{prefix}.{required}", "missing (every step needs a name and a run command)")
    name = _check_name(src, f"{prefix}.name", table["name"])
    run = table["run"]
    if not isinstance(run, str) or not run.strip() or "\0" in run or len(run) > MAX_RUN:
        raise PolicyError(src, f"{prefix}.run", f"expected a non-empty command string (at most {MAX_RUN} "
                          f"characters), got {kind_of(run)}")
    allow_failure = table.get("allow_failure", False)
    if type(allow_failure) is not bool:
        raise PolicyError(src, f"{prefix}.allow_failure", f"expected true or false, got {kind_of(allow_failure)}")
    timeout = parse_timeout(src, f"{prefix}.timeout", table["timeout"]) if "timeout" in table else None
    ref = table.get("policy")
    policy = None
    if ref is not None:
        if not isinstance(ref, str) or not ref:
            raise PolicyError(src, f"{prefix}.policy", f"expected a [policy.NAME] name or a path under "
                              f"{GATE_DIR}/, got {kind_of(ref)}")
        if "/" in ref or ref.endswith(".toml"):
            policy = _policy_file(src, f"{prefix}.policy", repo, ref, files)
        elif ref in tables:
            policy = tables[ref]
        else:
            known = ", ".join(escape.key(t) for t in sorted(tables)) or "none defined"
            raise PolicyError(src, f"{prefix}.policy", f"no [policy.{escape.key(ref)}] table (defined: {known})")
    return Step(name, run, ref, policy, timeout, allow_failure)


def gate_path(repo: str) -> str:
    return os.path.join(repo, GATE_DIR, GATE_FILE)


def load(repo) -> Gate:
    """Read `REPO/.007/gate.toml` and every policy it names; raise `PolicyError` on any problem."""
    repo = os.path.realpath(os.fspath(repo))
    src = gate_path(repo)
    if not os.path.isdir(repo):
        raise PolicyError(repo, "", "not a directory (expected a repository with .007/gate.toml)")
    # strictly inside the repository: `.007` or gate.toml a symlink out of it is refused whether
    # or not its target exists, and what is checked is what is read (one open)
    found = read_inside(repo, f"{GATE_DIR}/{GATE_FILE}", MAX_POLICY_BYTES, src)
    if found is None:
        raise PolicyError(src, "", "no gate file (create .007/gate.toml with at least one [[step]])")
    raw = found[1]
    # Through the policy parse cache (keyed on these exact bytes; `tomllib`'s import and parse
    # are ≈ 6 ms of the gate's start-up): a fresh parse is cached only once it is a valid gate,
    # and what the cache gives is validated again like a fresh parse.
    fresh = []
    data = parse_cached(src, raw, lambda parsed: fresh.append(from_data(parsed, repo, src)))
    return fresh[0] if fresh else from_data(data, repo, src)


def from_data(data: dict, repo: str, src: str) -> Gate:
    """Validate a parsed gate file of the repository `repo` (a real path)."""
    checked_table(src, "", data, _TOP_KEYS)
    shell = _shell(src, data.get("gate", {}))
    tables = _policy_tables(src, data.get("policy", {}))
    steps_raw = data.get("step")
    if steps_raw is None:
        raise PolicyError(src, "step", "no steps (add at least one [[step]] with name and run)")
    if not isinstance(steps_raw, list):
        raise PolicyError(src, "step", f"expected [[step]] tables, got {kind_of(steps_raw)}")
    if not steps_raw or len(steps_raw) > MAX_STEPS:
        raise PolicyError(src, "step", f"expected 1 to {MAX_STEPS} steps, got {len(steps_raw)}")
    steps, seen, files = [], set(), _PolicyFiles()
    for i, table in enumerate(steps_raw):
        step = _step(src, i, table, tables, repo, files)
        if step.name in seen:
            raise PolicyError(src, f"step[{i}].name", f"duplicate step name {step.name!r} (names must be unique)")
        seen.add(step.name)
        steps.append(step)
    _check_policy_weight(src, steps)
    return Gate(repo, src, shell, steps)


def _weight(policy) -> tuple[int, int]:
    """(entries, characters) of a step policy's lists and tables."""
    entries = chars = 0
    for section in (policy.fs, policy.net, policy.seccomp, policy.env):
        for name in section.__slots__:
            value = getattr(section, name)
            if isinstance(value, tuple):
                entries += len(value)
                for item in value:  # a string, a port, or an env.set (name, value) pair
                    chars += sum(len(str(part)) for part in item) if isinstance(item, tuple) else len(str(item))
    return entries, chars


def _check_policy_weight(src: str, steps: list) -> None:
    """Refuse a gate whose steps' policies together hold more than MAX_GATE_POLICY_ENTRIES entries
    or MAX_GATE_POLICY_TEXT characters, each policy counted once per step that names it."""
    weights: dict = {}  # id(policy) -> weight: steps naming one file or table share its Policy
    entries = chars = 0
    for i, step in enumerate(steps):
        if step.policy is None:
            continue
        weight = weights.get(id(step.policy))
        if weight is None:
            weight = weights[id(step.policy)] = _weight(step.policy)
        entries, chars = entries + weight[0], chars + weight[1]
        if entries > MAX_GATE_POLICY_ENTRIES or chars > MAX_GATE_POLICY_TEXT:
            raise PolicyError(src, f"step[{i}] ({step.name!r}).policy",
                              f"the steps' policies hold {entries} entries ({chars} characters) by this step, "
                              f"each counted once per step that uses it; at most {MAX_GATE_POLICY_ENTRIES} "
                              f"entries and {MAX_GATE_POLICY_TEXT} characters in a gate: each entry is resolved, "
                              "met with the ceiling and reported again for every step; grant directories rather "
                              "than files, or share fewer large policies between steps")
