"""Load a policy file: one bounded read, the parse cache, and validation of every key.

Returns plain values (a dict of sections, each a dict of normalized fields); `policy.model`
turns them into records. This module never imports the model, so the two form no circle.

Start-up cost matters here: `tomllib` imports `re` (together ≈ 25 ms, more than the whole cage).
So a validated policy is cached (`marshal`, keyed on the file's exact bytes) and the TOML parse
(`toml_file.py`, with the guards every Sandboy TOML file gets) runs only on a miss. Cached data
is validated again on every load, so the cache saves parsing only and can never widen a policy.
See docs/findings.md (imports decide start-up) and docs/performance.md.
"""

import _imp
import os

from sandboy.errors import PolicyError
from sandboy.cache_places import cache_dir  # noqa: F401  (the one rule; tests read it from here too)

# The policy's sections and keys, shared with the records (`policy.model` imports them from
# here). Not a module of their own: model and load are both on every `sandboy run`'s path, and a
# module costs ≈ 0.1 ms to find and load whatever its size (docs/performance.md).
SECTIONS = ("fs", "net", "ipc", "seccomp", "env", "limits", "compat")
DEFAULT_ENV_PASS = ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "TZ")
LIMIT_KEYS = ("wall_seconds", "cpu_seconds", "memory_mib", "processes", "open_files", "file_size_mib")

MAX_POLICY_BYTES = 1 << 20
PLACEHOLDERS = ("cwd", "home", "tmp", "policy_dir", "repo")
_CACHE_FORMAT = 1


# --- small validators: each returns the normalized value or raises PolicyError ----------------


def _str_list(src: str, key: str, value, check=None) -> tuple:
    if not isinstance(value, list):
        raise PolicyError(src, key, f"expected a list of strings, got {kind_of(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise PolicyError(src, f"{key}[{i}]", f"expected a string, got {kind_of(item)}")
        if check is not None:
            check(src, f"{key}[{i}]", item)
    # duplicates dropped, first one kept, in linear time: a hostile gate's step policy may list
    # tens of thousands of paths (`item not in out` took ≈ 4 s for 20,000)
    return tuple(dict.fromkeys(value))


def _path(src: str, key: str, value: str) -> None:
    if not value:
        raise PolicyError(src, key, "empty path (use \".\" for the working directory)")
    if "\0" in value:
        raise PolicyError(src, key, "path contains a NUL byte")
    rest = value
    while "{" in rest:
        start = rest.index("{")
        end = rest.find("}", start)
        if end < 0:
            raise PolicyError(src, key, f"unclosed placeholder in {value!r}")
        name = rest[start + 1 : end]
        if name not in PLACEHOLDERS:
            known = " ".join("{" + p + "}" for p in PLACEHOLDERS)
            raise PolicyError(src, key, f"unknown placeholder {{{name}}} in {value!r} (known: {known})")
        rest = rest[end + 1 :]
    if "}" in rest:
        raise PolicyError(src, key, f"stray '}}' in {value!r}")


def _port_list(src: str, key: str, value) -> tuple:
    if not isinstance(value, list):
        raise PolicyError(src, key, f"expected a list of TCP ports (integers 1-65535), got {kind_of(value)}")
    for i, item in enumerate(value):
        if type(item) is not int or not 0 < item < 65536:
            raise PolicyError(src, f"{key}[{i}]", f"expected a TCP port 1-65535, got {item!r}")
    return tuple(sorted(set(value)))


def _bool(src: str, key: str, value) -> bool:
    if type(value) is not bool:
        raise PolicyError(src, key, f"expected true or false, got {kind_of(value)}")
    return value


def _count(src: str, key: str, value) -> int:
    if type(value) is not int or value < 0:
        raise PolicyError(src, key, f"expected a whole number >= 0 (0 = no limit), got {value!r}")
    if value > 1 << 40:
        raise PolicyError(src, key, f"{value} is too large")
    return value


def _syscall(src: str, key: str, name: str) -> None:
    from sandboy.policy.syscalls import X86_64

    if name not in X86_64:
        import difflib

        near = difflib.get_close_matches(name, X86_64, n=3)
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        raise PolicyError(src, key, f"unknown system call {name!r} for x86_64{hint}")


def _env_name(src: str, key: str, name: str) -> None:
    if not name or "=" in name or "\0" in name:
        raise PolicyError(src, key, f"not an environment variable name: {name!r}")


def check_domain(src: str, key: str, value: str) -> None:
    """A PolicyError naming `key` unless `value` is a `net.domains` entry egress.rules accepts."""
    from sandboy.egress.rules import EntryError, parse_entry

    try:
        parse_entry(value)
    except EntryError as exc:
        raise PolicyError(src, key, str(exc)) from None


def check_allowed_domain(src: str, key: str, value: str) -> None:
    """check_domain, and not a wildcard over a public suffix (`*.com`): an allow entry only."""
    from sandboy.egress.rules import parse_entry, public_suffix_wildcard

    check_domain(src, key, value)
    broad = public_suffix_wildcard(parse_entry(value))
    if broad:
        raise PolicyError(src, key, f"{value!r} allows every host anyone can register under the {broad}: "
                          "list the hosts you need (\"pypi.org\", \"*.pythonhosted.org\"), or, to allow every "
                          "host, say so with net.unrestricted = true instead of net.domains")


def _cidr(src: str, key: str, value: str) -> None:
    import ipaddress

    try:
        net = ipaddress.ip_network(value, strict=False)
    except ValueError as exc:
        raise PolicyError(src, key, f"not a CIDR: {exc}") from None
    if not (net.is_private or net.is_loopback or net.is_link_local):
        raise PolicyError(src, key, f"{value} is not a private, loopback or link-local range")


def _keyname(name) -> str:
    """A key as TOML would write it (`sandboy.escape.key`: keys come from untrusted files)."""
    from sandboy.escape import key  # lazy: only error messages need it

    return key(name)


def kind_of(value) -> str:
    """A TOML value's type in words, for "expected X, got an integer" messages."""
    names = {str: "a string", bool: "a boolean", int: "an integer", float: "a float",
             list: "a list", dict: "a table"}
    return names.get(type(value), type(value).__name__)


# --- sections ----------------------------------------------------------------------------


def unknown_key(name, known, what: str = "key") -> str:
    """The problem text for an unknown key: a "did you mean" when one is close (`limts`,
    `timeuot`, `steps`), then every key that is allowed. Used by the policy and gate.toml parsers;
    `what` names other unknown things the same way (`what=f"target {name!r}"`)."""
    import difflib

    near = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.6)
    hint = f"did you mean {near[0]!r}? " if near else ""
    return f"unknown {what} ({hint}expected one of: {', '.join(known)})"


def checked_table(src: str, key: str, value, known: tuple) -> dict:
    """`value` if it is a table whose keys are all in `known`, else a PolicyError naming `key`
    (or the first unknown `key.name`; `key` "" is the file's top level: `name`)."""
    if not isinstance(value, dict):
        raise PolicyError(src, key, f"expected a table [{key}], got {kind_of(value)}")
    for name in value:
        if name not in known:
            raise PolicyError(src, f"{key}.{_keyname(name)}" if key else _keyname(name), unknown_key(name, known))
    return value


def _protected_path(src: str, key: str, value: str) -> None:
    _path(src, key, value)
    if any(ch in value for ch in "*?["):
        # A protected path is bound read-only / split at launch; a pattern would protect
        # nothing a step creates later, so only literal paths are accepted.
        raise PolicyError(src, key, f"{value!r}: fs.protect takes literal paths, not globs")


def _fs(src, value) -> dict:
    t = checked_table(src, "fs", value, ("read", "exec", "write", "deny", "protect", "protect_defaults"))
    out = {}
    for k, v in t.items():
        if k == "protect_defaults":
            out[k] = _bool(src, "fs.protect_defaults", v)
        else:
            out[k] = _str_list(src, f"fs.{k}", v, _protected_path if k == "protect" else _path)
    return out


def _net(src, value) -> dict:
    known = ("connect_tcp", "bind_tcp", "udp", "unix", "domains", "private", "domains_deny", "unrestricted")
    t = checked_table(src, "net", value, known)
    out = {}
    for k, v in t.items():
        key = f"net.{k}"
        if k in ("connect_tcp", "bind_tcp"):
            out[k] = _port_list(src, key, v)
        elif k in ("domains", "domains_deny"):
            check = check_allowed_domain if k == "domains" else check_domain
            out[k] = tuple(dict.fromkeys(d.lower() for d in _str_list(src, key, v, check)))
        elif k == "private":
            out[k] = _str_list(src, key, v, _cidr)
        else:
            out[k] = _bool(src, key, v)
    for k in ("private", "domains_deny"):
        if out.get(k) and not out.get("domains"):
            # They only shape what the egress proxy may reach; without net.domains there is no
            # proxy, and a silently ignored rule reads as if it protected something.
            raise PolicyError(src, f"net.{k}", "only applies to the egress proxy, which net.domains starts: "
                              "add net.domains, or remove this key")
    if out.get("domains") and out.get("unrestricted"):
        raise PolicyError(src, "net.domains", "cannot be combined with net.unrestricted = true "
                          "(domains confine the network; unrestricted lifts every rule): keep one")
    return out


def _ipc(src, value) -> dict:
    t = checked_table(src, "ipc", value, ("sysv",))
    return {k: _bool(src, f"ipc.{k}", v) for k, v in t.items()}


def _seccomp(src, value) -> dict:
    t = checked_table(src, "seccomp", value, ("deny", "allow"))
    out = {k: _str_list(src, f"seccomp.{k}", v, _syscall) for k, v in t.items()}
    if out.get("allow"):
        # The kernel's key calls stay refused in every cage whatever a policy says (the filter's
        # own list, `seccomp.NEVER_ALLOWED`, ADR 0030): a policy file naming one is an error, not
        # a wish silently dropped.
        from sandboy.confine.seccomp import NEVER_ALLOWED

        for name in out["allow"]:
            if name in NEVER_ALLOWED:
                raise PolicyError(src, "seccomp.allow", f"{name} cannot be allowed: the kernel's keyring holds the "
                                  "key that seals Sandboy's cache (docs/adr/0030); remove it from seccomp.allow")
    return out


# MAX_ARG_STRLEN (32 pages of 4 KiB): the longest single argument or environment string, NUL
# included, that execve accepts.
MAX_ENV_STRING = 32 * 4096


def _env(src, value) -> dict:
    t = checked_table(src, "env", value, ("pass", "set"))
    out = {}
    if "pass" in t:
        out["pass_"] = _str_list(src, "env.pass", t["pass"], _env_name)
    if "set" in t:
        table = t["set"]
        if not isinstance(table, dict):
            raise PolicyError(src, "env.set", f"expected a table of NAME = \"value\", got {kind_of(table)}")
        pairs = []
        for name, val in table.items():
            if not name or "=" in name or "\0" in name:  # (the key is spelled out only on error)
                _env_name(src, f"env.set.{_keyname(name)}", name)
            if not isinstance(val, str):
                raise PolicyError(src, f"env.set.{_keyname(name)}", f"expected a string value, got {kind_of(val)}")
            if "\0" in val:  # was "expected a string value, got a string"
                raise PolicyError(src, f"env.set.{_keyname(name)}", "the value holds a NUL byte (no environment can)")
            # execve refuses any one NAME=value string longer than MAX_ARG_STRLEN: such a policy
            # loaded, then every command failed 126 "Argument list too long" naming no key
            # (redinput14, session 14). Checked on the encoded bytes, as the kernel counts them.
            size = len(os.fsencode(name)) + 1 + len(os.fsencode(val)) + 1
            if size > MAX_ENV_STRING:
                raise PolicyError(src, f"env.set.{_keyname(name)}",
                                  f"NAME=value is {size:,} bytes; the kernel passes at most {MAX_ENV_STRING:,} per "
                                  "environment string (MAX_ARG_STRLEN): shorten it, or put the value in a file the "
                                  "policy grants and pass its path")
            pairs.append((name, val))
        out["set"] = tuple(pairs)
    return out


# The most processes the kernel can have (PID_MAX_LIMIT on 64-bit); a pids cgroup refuses a
# larger `pids.max` (EINVAL), which as root read as "no pids cgroup could be created" (session 9).
MAX_PROCESSES = 1 << 22


def _limits(src, value) -> dict:
    t = checked_table(src, "limits", value, LIMIT_KEYS)
    out = {k: _count(src, f"limits.{k}", v) for k, v in t.items()}
    if out.get("processes", 0) > MAX_PROCESSES:
        raise PolicyError(src, "limits.processes", f"{out['processes']} is more than the kernel can run "
                          f"({MAX_PROCESSES:,} processes): use at most {MAX_PROCESSES}, or 0 for no limit")
    return out


def _compat(src, value) -> dict:
    t = checked_table(src, "compat", value, ("landlock",))
    mode = t.get("landlock", "best-effort")
    if mode not in ("best-effort", "strict"):
        raise PolicyError(src, "compat.landlock", f"expected \"best-effort\" or \"strict\", got {mode!r}")
    return {"landlock": mode}


_SECTION_PARSERS = {"fs": _fs, "net": _net, "ipc": _ipc, "seccomp": _seccomp, "env": _env, "limits": _limits,
                    "compat": _compat}


def validate(data, source: str = "<policy>") -> dict:
    """{section: {field: normalized value}} for every section present; raises PolicyError."""
    if not isinstance(data, dict):
        raise PolicyError(source, "", f"expected a table, got {kind_of(data)}")
    if "version" not in data:
        raise PolicyError(source, "version", "missing (add `version = 1` at the top)")
    if data["version"] != 1 or type(data["version"]) is not int:
        raise PolicyError(source, "version", f"expected 1, got {data['version']!r}")
    fields = {}
    for key, value in data.items():
        if key in ("version", "include"):
            continue
        parser = _SECTION_PARSERS.get(key)
        if parser is None and key == "gate":  # (a ceiling file's own table: gate/ceiling.py reads it)
            raise PolicyError(source, "gate", "a step policy has no [gate] table: it belongs to the file given to "
                              "`sandboy gate --ceiling` (the gate's time budget), which reads it there")
        if parser is None:
            raise PolicyError(source, _keyname(key), unknown_key(key, ["version", "include", *_SECTION_PARSERS]))
        fields[key] = parser(source, value)
    if "include" in data:
        _include(source, data["include"], fields)
    return fields


def _include(src: str, value, fields: dict) -> None:
    """`include = ["system", "python"]`: the presets' file rules go in front of the policy's own
    (policy/presets.py resolves them on this machine)."""
    from sandboy.policy import presets

    names = _str_list(src, "include", value)
    for name in names:
        if name not in presets.PRESETS:
            import difflib

            near = difflib.get_close_matches(name, presets.PRESETS, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise PolicyError(src, "include", f"unknown preset {name!r} ({hint}expected some of: "
                                              f"{', '.join(presets.PRESETS)})")
    added = presets.expand(names)
    fs = fields.setdefault("fs", {})
    for kind, paths in added.items():
        fs[kind] = tuple(dict.fromkeys((*paths, *fs.get(kind, ()))))


# --- files and the parse cache --------------------------------------------------------


def read_bounded(path: str, limit: int = MAX_POLICY_BYTES) -> bytes:
    """One bounded read: never trust a size check made before the read. Opened non-blocking: a
    named FIFO with no writer (a checkout's `.sandboy/agent.toml` made one) hung `sandboy run
    --policy` for ever in open(2); a pipe (`--policy /dev/stdin`, `<(...)`) is then read as
    before (blocking again), and a FIFO no one writes reads as empty (redcage9)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise PolicyError(path, "", f"cannot read: {exc.strerror}") from None
    try:
        if os.fstat(fd).st_mode & 0o170000 == 0o010000:  # S_IFIFO (`stat` is imported by os)
            os.set_blocking(fd, True)
        data = read_fd_bounded(fd, limit)
    except IsADirectoryError:
        raise PolicyError(path, "", "is a directory, expected a TOML file") from None
    except OSError as exc:  # (a device that would block: EAGAIN)
        raise PolicyError(path, "", f"cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if data is None:
        raise PolicyError(path, "", f"file is larger than {limit} bytes")
    return data


def read_fd_bounded(fd: int, limit: int) -> bytes | None:
    """All of `fd` read to its end, or None once more than `limit` bytes came (never cut)."""
    chunks, total = [], 0
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > limit:
            return None
        chunks.append(chunk)


def read_fd_head(fd: int, limit: int) -> bytes:
    """The first `limit` bytes of `fd` (fewer at its end), read in pieces of 64 KiB: one
    `read(limit)` allocates all of `limit` first — 1 MiB for a 100-byte git config, ≈ 20 µs
    (protected._read_head, session 14)."""
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(left, 65536))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _cache_path(path: str) -> str:
    # The name only spreads entries out; correctness comes from comparing the stored bytes.
    # `_imp.source_hash` is the keyed SipHash that hash-based .pyc files use (PEP 552): built in,
    # already imported, and the same in every process (PYTHONHASHSEED does not touch it). An FNV-1a
    # loop in Python on 64-bit integers cost ≈ 3 k instructions a byte: ≈ 0.1 M for a 33-byte path,
    # a fifth of `sandboy run`'s policy load (docs/performance.md, session 7).
    key = _imp.source_hash(_CACHE_FORMAT, os.fsencode(os.path.abspath(path)))
    return os.path.join(cache_dir(), "policies", f"{key.hex()}.marshal")


def _cache_get(path: str, raw: bytes):
    import marshal

    from sandboy.confine._libc import read_private

    # marshal is not safe against hostile data, and a table of another's choosing widens the policy
    # whatever the validation says of it: only an entry sealed by this user's key for this very
    # name (`read_private`: owner and mode alone a checkout's files have — redcage13, ADR 0030)
    blob = read_private(_cache_path(path), 4 * MAX_POLICY_BYTES)
    if blob is None:
        return None
    try:
        fmt, stored_raw, data = marshal.loads(blob)
    except (EOFError, ValueError, TypeError):
        return None
    if fmt != _CACHE_FORMAT or stored_raw != raw:
        return None
    return data


# A file larger than this is parsed every time, never cached: an entry holds the file's bytes
# (compared at every hit), and a gate's repository chooses its step policy files — 50 files of
# 1 MiB (comments weigh nothing against the gate's policy budget) wrote 50 MB into the operator's
# cache in one run, up to 1,000 such files a run, a set per checkout path (session 9). Policies
# are a few kB; the parse of a large one costs milliseconds, once per gate.
MAX_CACHED_BYTES = 16 << 10


def _cache_put(path: str, raw: bytes, data: dict) -> None:
    import marshal

    if len(raw) > MAX_CACHED_BYTES:
        return
    try:
        blob = marshal.dumps((_CACHE_FORMAT, raw, data))
    except ValueError:
        return  # a cache that cannot be written only costs speed
    # relative to a directory no other user chooses (a temporary file opened by path, O_TRUNC,
    # followed a link planted in a cache directory another user swapped in: session 11)
    from sandboy.confine.cache_files import write_file

    write_file(*os.path.split(_cache_path(path)), blob)


def parse_cached(path: str, raw: bytes, check) -> dict:
    """`toml_file.parse_toml(raw, path)`, or the table the cache holds for exactly these bytes
    of `path` (then neither `toml_file` nor `tomllib` is even imported). A fresh parse is cached
    only once `check(data)` returned (it raises PolicyError for a bad file: never cache one). A
    cached table saves parsing only: the caller validates whatever it gets (`Policy.load`, the
    gate's file)."""
    data = _cache_get(path, raw)
    if data is None:
        from sandboy.policy.toml_file import parse_toml

        data = parse_toml(raw, path)
        check(data)
        _cache_put(path, raw, data)
    return data


def read_table(path: str, use_cache: bool = True, raw: bytes | None = None) -> dict:
    """The file's TOML table, parsed or from the cache. The caller validates it again
    (`Policy.load`): a cached table saves parsing only and can never widen a policy. `raw`: the
    file's bytes, where the caller read them already (the plan cache: `plan_cache._read_policy`,
    whose own bound is a copy of MAX_POLICY_BYTES — held here whoever read them)."""
    if raw is None:
        raw = read_bounded(path)
    elif len(raw) > MAX_POLICY_BYTES:
        raise PolicyError(path, "", f"file is larger than {MAX_POLICY_BYTES} bytes")
    if not use_cache:
        from sandboy.policy.toml_file import parse_toml

        return parse_toml(raw, path)
    return parse_cached(path, raw, lambda data: validate(data, path))
