"""`adapters.toml`: which analysers `sandboy audit run` knows and how each is invoked.

Three layers, later ones winning per tool: the built-in file (sandboy/audit/adapters.toml), the
repository's `.007/adapters.toml` (may only ADD tools, never with `network = true` or paths of
their own, and each phase within `REPOSITORY_LIMITS`: the repository is untrusted), and an
operator file (`--adapters FILE`, may add and override, raise or lower what a repository may ask
in its `[repository]` table, and set the whole run's time budget in `[run]`: sandboy.budget).
Validation is strict: any problem is a UsageError (exit 2) reading `FILE: key: problem`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandboy.audit.errors import UsageError
from sandboy.gate.ceiling import BUILTIN_LIMITS as STEP_CEILING

BUILTIN = Path(__file__).with_name("adapters.toml")
REPO_FILE = Path(".007") / "adapters.toml"
TOP_KEYS = ("version", "tools")
OPERATOR_TOP_KEYS = ("version", "tools", "repository", "run")
RUN_KEYS = ("budget",)
TOOL_KEYS = ("adapter", "platform", "build_free", "requires", "output", "phases", "config")
CONFIG_KEYS = ("files", "argv", "otherwise")
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
OUTPUT_KEYS = ("kind", "from", "file", "artifact")
PHASE_KEYS = ("name", "argv", "include", "read", "exec", "write", "network", "ok_exit", "wall_seconds", "memory_mib",
              "processes")
# Each limit a phase may set: (default, lowest, highest) for any file. `processes` is the
# phase's process and thread count (a pids cgroup as root), the gate's default per step.
PHASE_LIMITS = {"wall_seconds": (900, 1, 86400), "memory_mib": (2048, 16, 1 << 20), "processes": (512, 1, 1 << 16)}
# What a repository's own `.007/adapters.toml` may ask per phase — the repository is the
# untrusted party, and before this a phase could hold the host for a day with a TiB of memory:
# the gate's built-in step ceiling for time and processes (one hour, 512: gate/ceiling.py), and
# for memory what the heaviest built-in analysers ask (CodeQL, Infer: 8 GiB). Output is not the
# file's to ask: every file a phase writes is bounded by pipeline.CAPTURE_MIB. An operator moves
# these with `[repository]` in `--adapters FILE`, or takes the tool over by defining it there.
REPOSITORY_LIMITS = {"wall_seconds": STEP_CEILING["wall_seconds"], "memory_mib": 8192,
                     "processes": STEP_CEILING["processes"]}
PLATFORMS = ("linux", "windows", "any")
KINDS = ("sarif", "native-json")
SOURCES = ("file", "stdout")
PLACEHOLDERS = ("{repo}", "{out}", "{home}", "{builtin}")
CONFIG_ARG = "{config}"   # a whole argv element: the arguments ConfigChoice picks


@dataclass(frozen=True)
class Phase:
    name: str
    argv: tuple[str, ...]
    include: tuple[str, ...] = ()
    read: tuple[str, ...] = ()
    exec: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    network: bool = False
    ok_exit: tuple[int, ...] = (0,)
    wall_seconds: int = PHASE_LIMITS["wall_seconds"][0]
    memory_mib: int = PHASE_LIMITS["memory_mib"][0]
    processes: int = PHASE_LIMITS["processes"][0]


@dataclass(frozen=True)
class ConfigChoice:
    """How a tool is pointed at its configuration, decided per repository: the first of `files`
    the repository holds becomes `argv` (with {file} = its path), else `otherwise`. The cage
    shows a tool nothing above the repository, so a tool that would walk up looking for config is
    given it explicitly (or told not to look)."""
    files: tuple[str, ...]
    argv: tuple[str, ...]
    otherwise: tuple[str, ...]

    def pick(self, repo: Path) -> tuple[str | None, list[str]]:
        """(the repository file used or None, the arguments). Each file is looked up strictly
        inside the repository: one that leads out through a symlink raises OutsideRepository
        (which file was picked is written into the SARIF: it must not tell whether a host path
        exists)."""
        import os

        from sandboy.repository_files import resolve_inside

        for name in self.files:
            path = resolve_inside(str(repo), name, "the repository's configuration", "")
            if os.path.isfile(path):
                return name, [a.replace("{file}", path) for a in self.argv]
        return None, list(self.otherwise)


@dataclass(frozen=True)
class Tool:
    name: str
    adapter: str
    platform: str
    build_free: bool
    output_kind: str
    output_from: str
    output_file: str | None
    artifact: str
    phases: tuple[Phase, ...]
    requires: tuple[str, ...] = ()
    config: ConfigChoice | None = None
    source: str = ""  # the file this entry came from

    def runs_here(self) -> bool:
        return self.platform == "any" or (self.platform == "linux") == sys.platform.startswith("linux")


@dataclass
class ToolSet:
    tools: dict[str, Tool] = field(default_factory=dict)


def _fail(src: str, key: str, problem: str) -> UsageError:
    from sandboy.escape import clean

    return UsageError(f"{clean(src)}: {clean(key)}: {problem}")


def _inside_repository(src: str, key: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """`names` if every one is a relative path without '..' (looked up under the repository on
    the host: '/etc/x' would tell the repository which host files exist)."""
    for name in names:
        if name.startswith("/") or ".." in Path(name).parts:
            raise _fail(src, key, f"expected a path inside the repository, got {name!r:.60}")
    return names


def _plain_name(src: str, key: str, name: str, what: str, names: str) -> None:
    """A name the pipeline makes a path component of: a letter or digit, then letters, digits,
    '.', '_', '-', at most 64 characters — never a path, '..' or an option."""
    if not (0 < len(name) <= 64 and name[0].isascii() and name[0].isalnum() and set(name) <= _NAME_CHARS):
        raise _fail(src, key, f"{what} is a plain name: a letter or digit, then letters, digits, '.', '_', '-' "
                    f"(at most 64 characters; it names {names})")


def _check_keys(src: str, where: str, table: Any, known: tuple[str, ...]) -> dict[str, Any]:
    """policy.load's check of a table's keys, as this module's UsageError. The message is one
    line, cleaned whole: `where` holds tool names from the (untrusted) file."""
    from sandboy.errors import PolicyError
    from sandboy.escape import clean
    from sandboy.policy.load import checked_table

    try:
        return checked_table(src, where, table, known)
    except PolicyError as exc:
        raise UsageError(clean(str(exc))) from None


def _str(src: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(src, key, f"expected a non-empty string, got {value!r:.60}")
    if "\0" in value:  # an argument, a path or a name: none can hold one (the supervisor died on it)
        raise _fail(src, key, "contains a NUL byte")
    return value


def _strs(src: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _fail(src, key, "expected a list of non-empty strings")
    for i, item in enumerate(value):
        _str(src, f"{key}[{i}]", item)
    return tuple(value)


def _int(src: str, key: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _fail(src, key, f"expected an integer from {low} to {high}, got {value!r:.60}")
    return value


def _bool(src: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _fail(src, key, "expected true or false")
    return value


def _choice(src: str, key: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise _fail(src, key, f"expected one of {', '.join(choices)}, got {value!r:.60}")
    return value


def _phase(src: str, key: str, data: Any, index: int) -> Phase:
    from sandboy.policy.presets import PRESETS

    data = _check_keys(src, key, data, PHASE_KEYS)
    argv = _strs(src, f"{key}.argv", data.get("argv"))
    if not argv:
        raise _fail(src, f"{key}.argv", "expected at least the command")
    if argv[0].startswith("{") or "/" in argv[0]:
        raise _fail(src, f"{key}.argv", f"argv[0] must be a command name found on PATH, got {argv[0]!r:.60}")
    include = _strs(src, f"{key}.include", data.get("include", []))
    for name in include:
        if name not in PRESETS:
            raise _fail(src, f"{key}.include", f"unknown preset {name!r:.40} (known: {', '.join(PRESETS)})")
    network = _bool(src, f"{key}.network", data.get("network", False))
    ok_exit = data.get("ok_exit", [0])
    if not isinstance(ok_exit, list) or not ok_exit:
        raise _fail(src, f"{key}.ok_exit", "expected a non-empty list of exit statuses")
    name = _str(src, f"{key}.name", data.get("name", f"phase{index + 1}"))
    # LOGS/<name>.stdout and .stderr, written by Sandboy on the host with the confined tool's
    # output: a path would let the repository choose the file.
    _plain_name(src, f"{key}.name", name, "a phase's name", "its log files")
    return Phase(
        name=name,
        argv=argv, include=include,
        read=_strs(src, f"{key}.read", data.get("read", [])),
        exec=_strs(src, f"{key}.exec", data.get("exec", [])),
        write=_strs(src, f"{key}.write", data.get("write", [])),
        network=network,
        ok_exit=tuple(_int(src, f"{key}.ok_exit", v, 0, 255) for v in ok_exit),
        **{limit: _int(src, f"{key}.{limit}", data.get(limit, default), low, high)
           for limit, (default, low, high) in PHASE_LIMITS.items()},
    )


def _tool(src: str, name: str, data: Any) -> Tool:
    from sandboy.audit.registry import ADAPTERS

    key = f"tools.{name}"
    data = _check_keys(src, key, data, TOOL_KEYS)
    # WORK/<name>/{out,home,logs}, writable by the confined tool: "/" or "../.." would put them
    # where the (repository's) file chose.
    _plain_name(src, key, name, "a tool's name", "the tool's work directory")
    for required in ("adapter", "output", "phases"):
        if required not in data:
            raise _fail(src, f"{key}.{required}", "missing (every tool names its adapter, output and phases)")
    adapter = _str(src, f"{key}.adapter", data["adapter"])
    if adapter not in ADAPTERS:
        raise _fail(src, f"{key}.adapter", f"unknown adapter {adapter!r:.40} (known: {', '.join(sorted(ADAPTERS))})")
    build_free = _bool(src, f"{key}.build_free", data.get("build_free", False))
    out = _check_keys(src, f"{key}.output", data["output"], OUTPUT_KEYS)
    kind = _choice(src, f"{key}.output.kind", out.get("kind"), KINDS)
    origin = _choice(src, f"{key}.output.from", out.get("from"), SOURCES)
    file = out.get("file")
    if origin == "file":
        file = _str(src, f"{key}.output.file", file)
        if file.startswith("/") or ".." in Path(file).parts:
            raise _fail(src, f"{key}.output.file", "expected a relative path inside the output directory {out}")
    elif file is not None:
        raise _fail(src, f"{key}.output.file", "only with from = \"file\"")
    phases = data["phases"]
    if not isinstance(phases, list) or not phases:
        raise _fail(src, f"{key}.phases", "expected at least one [[phases]] table")
    parsed = tuple(_phase(src, f"{key}.phases[{i}]", p, i) for i, p in enumerate(phases))
    config = _config(src, f"{key}.config", data["config"]) if "config" in data else None
    for i, phase in enumerate(parsed):
        for arg in phase.argv:
            if CONFIG_ARG in arg and arg != CONFIG_ARG:
                raise _fail(src, f"{key}.phases[{i}].argv", f"{CONFIG_ARG} must be a whole argument (it stands for several)")
            if arg == CONFIG_ARG and config is None:
                raise _fail(src, f"{key}.phases[{i}].argv", f"{CONFIG_ARG} needs a [tools.{name}.config] table saying what it is")
    if config is not None and not any(CONFIG_ARG in p.argv for p in parsed):
        raise _fail(src, f"{key}.config", f"no phase's argv has {CONFIG_ARG}, so this table would do nothing")
    return Tool(
        name=name, adapter=adapter,
        platform=_choice(src, f"{key}.platform", data.get("platform", "any"), PLATFORMS),
        build_free=build_free, output_kind=kind, output_from=origin, output_file=file,
        artifact=_str(src, f"{key}.output.artifact", out.get("artifact", Path(file).name if file else "stdout")),
        phases=parsed,
        requires=_inside_repository(src, f"{key}.requires", _strs(src, f"{key}.requires", data.get("requires", []))),
        config=config,
        source=src,
    )


def _config(src: str, key: str, data: Any) -> ConfigChoice:
    data = _check_keys(src, key, data, CONFIG_KEYS)
    files = _strs(src, f"{key}.files", data.get("files"))
    if not files:
        raise _fail(src, f"{key}.files", "expected at least one file name")
    _inside_repository(src, f"{key}.files", files)
    argv = _strs(src, f"{key}.argv", data.get("argv"))
    otherwise = data.get("otherwise", [])
    if not isinstance(otherwise, list) or not all(isinstance(v, str) and v for v in otherwise):
        raise _fail(src, f"{key}.otherwise", "expected a list of non-empty strings (may be empty)")
    return ConfigChoice(files, argv, _strs(src, f"{key}.otherwise", otherwise))


def parse(text: str | bytes, src: str) -> dict[str, Tool]:
    """Entries from an adapters.toml's contents, read the way policy files are (policy.load):
    UTF-8, the TOML guards (long dotted keys, deep nesting, huge integers), errors naming FILE."""
    return _parse(text, src, TOP_KEYS)[0]


def parse_operator(text: str | bytes, src: str) -> tuple[dict[str, Tool], dict[str, int], int | None]:
    """An operator file's entries, what a repository's phases may ask (`[repository]`, else
    REPOSITORY_LIMITS) and the run's time budget (`[run] budget` in seconds, None: not set)."""
    return _parse(text, src, OPERATOR_TOP_KEYS)


def _run_budget(src: str, data: Any) -> int:
    """`[run] budget`: the whole audit run's wall time in seconds (0 = none; sandboy.budget)."""
    from sandboy import budget
    from sandboy.errors import PolicyError

    table = _check_keys(src, "run", data, RUN_KEYS)
    if "budget" not in table:
        raise _fail(src, "run.budget", "missing (the [run] table holds the audit's time budget, e.g. budget = \"2h\")")
    try:
        return budget.parse(src, "run.budget", table["budget"])
    except PolicyError as exc:
        raise UsageError(str(exc)) from None


def _repository_limits(src: str, data: Any) -> dict[str, int]:
    limits = dict(REPOSITORY_LIMITS)
    for limit, value in _check_keys(src, "repository", data, tuple(REPOSITORY_LIMITS)).items():
        _, low, high = PHASE_LIMITS[limit]
        limits[limit] = _int(src, f"repository.{limit}", value, low, high)
    return limits


def _parse(text: str | bytes, src: str, top_keys: tuple[str, ...]) -> tuple[dict[str, Tool], dict[str, int], int | None]:
    from sandboy.errors import PolicyError
    from sandboy.policy.toml_file import parse_toml

    try:
        data = parse_toml(text.encode() if isinstance(text, str) else text, src)
    except PolicyError as exc:
        raise UsageError(str(exc)) from None
    if "repository" in data and "repository" not in top_keys:
        raise _fail(src, "repository", "only an operator file (--adapters FILE) says what a repository's tools may ask")
    if "run" in data and "run" not in top_keys:
        raise _fail(src, "run", "only an operator file (--adapters FILE) sets the audit's time budget")
    _check_keys(src, "", data, top_keys)
    if data.get("version") != 1:
        raise _fail(src, "version", "expected version = 1")
    tools = data.get("tools", {})
    _check_keys(src, "tools", tools, tuple(tools) if isinstance(tools, dict) else ())  # any name: a table
    limits = _repository_limits(src, data["repository"]) if "repository" in data else dict(REPOSITORY_LIMITS)
    run_budget = _run_budget(src, data["run"]) if "run" in data else None
    return {name: _tool(src, f"{name}", entry) for name, entry in tools.items()}, limits, run_budget


def _read_bytes(path: Path) -> bytes:
    """One bounded read (a file over policy.load.MAX_POLICY_BYTES is refused, never cut)."""
    from sandboy.errors import PolicyError
    from sandboy.policy.load import MAX_POLICY_BYTES, read_bounded

    try:
        return read_bounded(str(path), MAX_POLICY_BYTES)
    except PolicyError as exc:
        raise UsageError(str(exc)) from None


def read(path: Path) -> dict[str, Tool]:
    return parse(_read_bytes(path), str(path))


def read_repository_file(repo: Path) -> tuple[str, dict[str, Tool]] | None:
    """(its path, its entries) of the repository's `.007/adapters.toml`, None when it has none.
    Looked up strictly inside the repository (`.007` or the file a symlink to `/root/...` was
    read with the host's rights), a regular file only, bounded."""
    from sandboy.errors import PolicyError
    from sandboy.policy.load import MAX_POLICY_BYTES
    from sandboy.repository_files import read_inside

    src = str(repo / REPO_FILE)
    try:
        found = read_inside(str(repo), str(REPO_FILE), MAX_POLICY_BYTES, src)
    except PolicyError as exc:
        raise UsageError(str(exc)) from None
    return None if found is None else (src, parse(found[1], src))


def _within_repository_limits(src: str, name: str, tool: Tool, limits: dict[str, int]) -> None:
    """A repository's phase asking more than `limits` is refused, saying how an operator allows it."""
    for i, phase in enumerate(tool.phases):
        for limit, most in limits.items():
            value = getattr(phase, limit)
            if value > most:
                raise _fail(src, f"tools.{name}.phases[{i}].{limit}",
                            f"{value} is more than a repository's adapters.toml may ask ({most}); the operator "
                            f"may allow it with `[repository] {limit} = {value}` in --adapters FILE (or define "
                            f"tools.{name} there)")


def load(repo: Path | None = None, operator: Path | None = None) -> dict[str, Tool]:
    """Built-in entries, then the repository's additions, then the operator's file (read first:
    its `[repository]` table bounds the repository's phases, and a tool it defines replaces the
    repository's entry of that name unchecked)."""
    return load_for_run(repo, operator)[0]


def load_for_run(repo: Path | None = None, operator: Path | None = None) -> tuple[dict[str, Tool], int | None]:
    """(the tools as `load` gives them, the operator file's `[run] budget` in seconds — 0: no
    budget, None: the file sets none, or there is no file)."""
    tools = read(BUILTIN)
    ops: dict[str, Tool] = {}
    limits = dict(REPOSITORY_LIMITS)
    run_budget = None
    if operator is not None:
        if not operator.is_file():
            raise UsageError(f"{operator}: no such adapters file")
        ops, limits, run_budget = parse_operator(_read_bytes(operator), str(operator))
    found = read_repository_file(repo) if repo is not None else None
    if found is not None:
        src, entries = found
        for name, tool in entries.items():
            if name in tools:
                raise _fail(str(src), f"tools.{name}", "a repository may add tools, not redefine a built-in "
                            "one (an operator file, --adapters FILE, may)")
            if name in ops:
                continue  # the operator's own entry of that name is what runs
            for i, phase in enumerate(tool.phases):
                if phase.network:
                    raise _fail(str(src), f"tools.{name}.phases[{i}].network",
                                "a repository cannot grant its tools the network (an operator file may)")
                # Paths go into the phase's cage as they are: `write = ["/root"]` would make the
                # host writable to the repository's own tool.
                for field in ("read", "write", "exec"):
                    if getattr(phase, field):
                        raise _fail(str(src), f"tools.{name}.phases[{i}].{field}",
                                    "a repository cannot widen its tools' cage: a phase reads the repository "
                                    "and writes {out}, {home} and {tmp} (an operator file, --adapters FILE, may add paths)")
            _within_repository_limits(str(src), name, tool, limits)
            tools[name] = tool
    tools.update(ops)
    return tools, run_budget
