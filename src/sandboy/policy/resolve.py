"""Turn policy paths as written into absolute paths for one run.

Placeholders: {cwd} {home} {tmp} {policy_dir} {repo}; a relative path is under {cwd}. They are
replaced in one pass over the text as written, and not in a path written absolute: a directory
may be named `{home}`, and a policy the gate resolved is resolved again in the cage (session 8).
`{tmp}` is private to each run (a directory made for the cage, or under the namespace tier a
tmpfs of the run's own on `sandboy run`'s fixed mount point: `cage.build(fixed_tmp=)`); a context
without one keeps the literal `{tmp}` prefix so that two policies (a step and its ceiling) can still be compared path by path.
"""

import os

# (kept apart so that a plan cache hit, which needs only them, reads none of this module: the
# cache's places in sandboy/cache_places.py, the executor's PATH search in confine/_libc.py;
# session 12. Their callers may still import them from here.)
from sandboy.cache_places import PLAN_CACHE_ENV, cache_dir, plan_cache_enabled, plan_entry_path, plans_dir  # noqa: F401
from sandboy.confine._libc import DEFAULT_PATH, exec_args, path_candidates  # noqa: F401
from sandboy.paths import is_within, is_within_any  # noqa: F401  (the write-root hit's checks: sandboy/paths.py)

TMP_TOKEN = "{tmp}"


class Context:
    __slots__ = ("cwd", "home", "tmp", "policy_dir", "repo")

    def __init__(self, cwd=None, home=None, tmp=None, policy_dir=None, repo=None):
        self.cwd = os.path.abspath(cwd or os.getcwd())
        self.home = home or os.path.expanduser("~")
        self.tmp = tmp
        self.policy_dir = policy_dir or self.cwd
        self.repo = repo or self.cwd

    def value(self, name: str):
        """The value of the placeholder `{name}`; None for no such placeholder or `{tmp}` not made."""
        return getattr(self, name) if name in Context.__slots__ else None


def substitute(text: str, value_of) -> str:
    """`text` with each `{name}` for which `value_of(name)` gives a value replaced by it, in ONE
    pass over the text as written: a value is never looked at again, so a directory literally
    named `{home}` (a working directory, a repository, a policy file's directory) stays that name
    — replacing the names one after the other replaced a later name inside an earlier one's
    value. A `{name}` without a value (`{tmp}` not made yet) is kept as written."""
    at = text.find("{")
    if at < 0:
        return text
    out, done = [], 0
    while at >= 0:
        end = text.find("}", at)
        if end < 0:
            break
        value = value_of(text[at + 1:end])
        if value is None:
            at = text.find("{", at + 1)
            continue
        out += (text[done:at], value)
        done = end + 1
        at = text.find("{", done)
    out.append(text[done:])
    return "".join(out)


def expand(raw: str, ctx: Context) -> str:
    """`raw`, a policy path, made absolute and normalized for this run. A path written absolute
    is taken as written: its placeholder text, if any, is a directory's name — and a policy the
    gate or `audit run` resolved once (with `{tmp}` kept) comes here again in the cage, where a
    repository in `/w/{home}` became `/w/` + the home at that second pass."""
    if raw.startswith("/"):
        return os.path.normpath(raw)
    out = substitute(raw, ctx.value)
    if ctx.tmp is None and TMP_TOKEN in raw and TMP_TOKEN in out:
        # Keep the token as an absolute-looking anchor: "{tmp}/x" stays "{tmp}/x".
        return os.path.normpath(out) if out.startswith(TMP_TOKEN) else out
    if not out.startswith("/"):
        out = os.path.join(ctx.cwd, out)
    return os.path.normpath(out)


def lookup_changeable(path: str, roots, max_links: int = 40) -> bool:
    """Could a process that writes only inside `roots` (realpaths or normalized paths) change
    what `path` resolves to? True when the lookup of `path` — symlinks followed, as the kernel
    follows them — reads an entry of a directory inside one of `roots`: only there can a process
    writing inside `roots` make, remove, rename or replace a name (a root itself is an entry of
    its parent, outside it). A lookup that reads no such directory resolves the same for as long
    as nothing else writes: the gate's steps, between which only the gate runs."""
    pending = [part for part in path.split("/") if part not in ("", ".")][::-1]
    current, links = "/", 0
    while pending:
        part = pending.pop()
        if part == "..":
            current = os.path.dirname(current)  # its entry in a directory not inside `roots`
            continue
        if is_within_any(current, roots):
            return True
        candidate = os.path.join(current, part)
        try:
            mode = os.lstat(candidate).st_mode
        except OSError:
            return False  # missing in a directory no such process can write: stays missing
        if (mode & 0o170000) != 0o120000:  # not a symlink
            current = candidate
            continue
        links += 1
        if links > max_links:
            return True  # (ELOOP for the kernel; not worth a proof)
        try:
            target = os.readlink(candidate)
        except OSError:
            return True  # a link we may not read (/proc/1/root): no proof, so looked up each time
        if target.startswith("/"):
            current = "/"
        pending.extend(part for part in target.split("/")[::-1] if part not in ("", "."))
    return False


class PathSet:
    """Roots that many paths are tested against: `covers(path)` answers `is_within_any(path,
    roots)` by looking its parent directories up in a set, not by comparing it with every root —
    a step policy's thousands of write roots against its thousands of protected paths were
    quadratic (8,000 of each: 24 s before the command ran). A root not written normally ("/",
    "a/", "a//b", "") is compared as `is_within` does."""

    def __init__(self, roots=()):
        self._exact: set = set()
        self._other: list = []
        for root in roots:
            self.add(root)

    def add(self, root: str) -> None:
        if not root or root.endswith("/") or "//" in root:
            self._other.append(root)
        else:
            self._exact.add(root)

    def covers(self, path: str) -> bool:
        exact = self._exact
        if path in exact or any(char == "/" and i and path[:i] in exact for i, char in enumerate(path)):
            return True
        return is_within_any(path, self._other)


class BuildLookups:
    """What ONE build asks of the file system about its write roots and work directories, asked
    once: `realpath` and `isdir` of a path, remembered for the rest of that build — the protected
    paths' watch and resolution, the PATH directories, Sandboy's own installation and the launch
    warnings each resolved the same roots again (≈ 10 realpaths of each root per build, 379 repeated
    stats in the README example's first run: docs/performance.md, "Session 14 — buildstat14").

    Made per build (`protections.Job.lookups`), never kept beyond it: a check after the run
    (`Fingerprint.unchanged`, the plan cache's entry written after the command) must see the file
    system as it is then, so it passes none and every function here asks anew (`lookups=None`).
    Sound within the build because the first question is asked after `stats_before`
    (`cage._build`): a root that leads elsewhere since is another inode for those stats, a miss at
    the next check, as with a realpath taken later."""

    __slots__ = ("_real", "_isdir", "_answers")

    def __init__(self):
        self._real: dict = {}
        self._isdir: dict = {}
        self._answers: dict = {}  # `once`'s

    def realpath(self, path: str) -> str:
        real = self._real.get(path)
        if real is None:
            real = self._real[path] = os.path.realpath(path)
        return real

    def isdir(self, path: str) -> bool:
        found = self._isdir.get(path)
        if found is None:
            found = self._isdir[path] = os.path.isdir(path)
        return found

    def once(self, question: tuple, answer):
        """`answer()`, computed at the first `question` (its name and arguments) of this build and
        given again to the same question later in it (`path_dirs.on_path`, asked three times)."""
        if question not in self._answers:
            self._answers[question] = answer()
        return self._answers[question]


def policy_dir(policy, fallback: str) -> str:
    """`{policy_dir}` for a policy: the directory of the file it was loaded from, or
    `fallback` for a policy that has no file (built-in, from a mapping, a gate step's table)."""
    source = policy.source
    if os.path.isfile(source):
        return os.path.dirname(os.path.abspath(source))
    return fallback


def is_glob(path: str) -> bool:
    """A deny pattern matched against the tree at launch (`*`, `?`, `[...]`), not a literal path."""
    return any(ch in path for ch in "*?[")


def uses_tmp(policy) -> bool:
    fs = policy.fs
    values = (value for _, value in policy.env.set)
    return any(TMP_TOKEN in p for p in (*fs.read, *fs.exec, *fs.write, *fs.deny, *fs.protect, *values))


def expand_value(raw: str, ctx: Context) -> str:
    """An `env.set` value with its placeholders replaced (`HOME = "{tmp}"`); unlike a path it is
    not made absolute or normalized: it is any string. One pass, as for a path (`substitute`)."""
    return substitute(raw, ctx.value)


def resolve(policy, ctx: Context):
    """A copy of `policy` whose fs paths are absolute and normalized (not symlink-resolved)."""
    fs = policy.fs

    def paths(items):
        # first occurrence kept, in order; a dict, not `in list`: a hostile gate's step policy
        # may list tens of thousands of paths (quadratic: 20,000 took 5 s)
        return tuple(dict.fromkeys(expand(raw, ctx) for raw in items))

    new_fs = fs.replace(read=paths(fs.read), exec=paths(fs.exec), write=paths(fs.write), deny=paths(fs.deny),
                        protect=paths(fs.protect))
    return policy.replace(fs=new_fs)


def unfollowable(exc: OSError, source: str, fs):
    """The policy error for `exc` when it was raised following the symlinks of one of `fs`'s
    paths (resolved, `policy.resolve`): os.path.realpath raises where readlink fails — the
    /proc/PID/root of a process this one may not trace (EACCES) — and the meet and the cage build
    follow every grant, deny and protect path. Names `source`, the key, the path and the fix:
    A `sandboy.errors.PolicyError`, or None when no path of `fs` lies at or under `exc.filename`
    (then `exc` is something else).
    Asked only after a failure: nothing is resolved twice on the way that works."""
    from sandboy.errors import PolicyError

    link = exc.filename
    if not isinstance(link, str) or not link.startswith("/"):
        return None
    for key in ("read", "exec", "write", "deny", "protect"):
        for path in getattr(fs, key):
            if is_within(path, link):
                return PolicyError(source, f"fs.{key}", f"{path!r}: cannot follow {link}: {exc.strerror} (a "
                                   "symlink this process may not read, such as /proc/PID/root of a process it "
                                   "cannot trace), so what the entry would grant or hide is unknown; name the "
                                   "path it leads to instead, or remove the entry")
    return None


def plan_may_keep(policy) -> bool:
    """Whether a run of `policy` may be kept by the plan cache at all, asked of the loaded policy
    before the build (so a policy never kept costs no fingerprint, and with no entry to compare
    with, not even the plan cache's import): no `[net]` egress, no run always
    supervised, and $HOME set. Write roots are kept: the protected paths are the fingerprint's (checked by their stats on
    a hit), the post-run git check runs on a hit too (`plan_cache.CachedPlan.run`). `include`
    is kept where every question its presets asked of the machine was recorded (`lookups`). `{tmp}`
    is kept under the namespace tier, where it is a fixed mount point (`cage.fixed_tmp_dir`, session
    12): not with the tier turned off (`SANDBOY_NAMESPACES=0`: a directory per run, supervised);
    where the kernel refuses the tier, the build keeps none (`plan_keep._tmp_mount_point`)."""
    import sys

    # `include`: the presets are resolved on this machine at every load (which programs exist,
    # where they lead), from answers `policy.lookups` records and a hit asks again; none kept
    # where one could not be recorded (a question that failed, two answers to one question).
    # `limits.wall_seconds`, and `limits.processes` as root, with the tier forced off:
    # `exec_mode.supervisor_needed` says a supervisor for every such run, so none reaches exec
    # mode, where an entry is made — a run asked for none pays no fingerprint, key or code
    # identities it never stores. Under the tier exec mode's wait for the init holds the deadline
    # (session 12) and as root makes, and removes after it, the run's pids cgroup (session 13):
    # kept, their values in the entry (`plan_cache.CachedPlan`), their bytes in the key; the
    # cgroup is made by every run, a hit's too (`init_wait.start_and_wait`), so nothing of it is
    # in the plan. (Where the kernel refuses the PID namespace at the build, the run is
    # supervised and keeps no entry: `plan_keep.store` is exec mode's.)
    limits = policy.limits
    lookups = sys.modules.get("sandboy.policy.lookups")
    tier_off = os.environ.get("SANDBOY_NAMESPACES") == "0"  # (namespaces.FORCE_OFF_ENV)
    return not ((uses_tmp(policy) and tier_off)
                or ("sandboy.policy.presets" in sys.modules and (lookups is None or lookups.recorded() is None))
                or policy.net.egress or "HOME" not in os.environ
                or (limits.wall_seconds and tier_off)
                or (limits.processes and tier_off and os.geteuid() == 0))
