"""Where Sandboy's cache lives (`cache_dir`: the one rule), and the plan cache's switch and places
in it (ADR 0028): what `sandboy run` asks before it knows whether a kept plan applies.

Apart from `policy.resolve` (which holds them before session 12 and still names them): a plan
cache hit needs these and the executor's PATH search (`confine._libc.exec_args`) only, and the
resolver's ≈ 19 kB of code, its two classes and the `sandboy.policy` package cost every hit
≈ 0.5 M instructions to load (docs/performance.md, "Session 12 — the plan-cache hit").
"""

import _imp
import os


def cache_dir() -> str:
    """Sandboy's cache directory: the policy parse cache, `sandboy run`'s plan cache (ADR 0028) and
    the audit adapters' components (`audit.build.cache_dir`) live under it, and the cage denies it
    to every command (ADR 0006). The one place this rule is written (here, so the plan cache finds
    it without importing the policy loader or resolver; `policy.load.cache_dir` and
    `policy.resolve.cache_dir` are the same function)."""
    # The same strings as os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(
    # os.path.expanduser("~"), ".cache"), "sandboy") (tests/policy/test_load.py compares them), at
    # half its cost: a `sandboy run` asks three times (the parse cache, the cage's deny of it, the
    # namespace note), and expanduser and join are ≈ 25 k instructions of Python (session 7).
    environ = os.environ
    base = environ.get("SANDBOY_CACHE_DIR")
    if base:
        return base
    xdg = environ.get("XDG_CACHE_HOME")
    if not xdg:
        home = environ.get("HOME")
        if home is None:  # expanduser asks the password database
            xdg = os.path.join(os.path.expanduser("~"), ".cache")
        else:  # expanduser("~") is $HOME without trailing slashes, or "/"
            xdg = home.rstrip("/") + "/.cache"
    return xdg + "sandboy" if xdg.endswith("/") else xdg + "/sandboy"


_PLAN_NAME_KEY = 0x53424F59504C414E  # the SipHash key of plan cache entries' names ("SBOYPLAN")
PLAN_CACHE_ENV = "SANDBOY_PLAN_CACHE"  # "0": nothing kept between runs (`keeps_between_runs`)


def keeps_between_runs() -> bool:
    """May this process read or write what Sandboy keeps from one `sandboy run` for the next —
    the plan cache's entries (ADR 0028) and the git check's walk index (ADR 0019 "Session 12")?
    Not with `SANDBOY_PLAN_CACHE=0`: the one switch for both, asked here (a run then reads and
    writes neither, and is built and walked in full)."""
    return os.environ.get(PLAN_CACHE_ENV, "1") != "0"


def plan_cache_enabled() -> bool:
    """May this process read and write plan cache entries? Not where nothing is kept between runs
    (`keeps_between_runs`), and only with the C executor (whose plans the entries hold). Here, so
    that a run with the cache turned off imports none of it (`confine.plan_cache.enabled` is this
    function: its import alone was ≈ 0.45 ms of such a run, session 10)."""
    if not keeps_between_runs():
        return False
    from sandboy.confine._libc import IMPLEMENTATION  # (the cached run's group: a build imports it anyway)

    return IMPLEMENTATION == "native"


def plans_dir() -> str:
    """Where `sandboy run`'s plan cache keeps its entries: `plans/` in the cache directory (ADR 0028;
    `sandboy doctor` says it)."""
    return os.path.join(cache_dir(), "plans")


def plan_entry_path(policy_arg: str, cwd: str) -> str:
    """The plan cache's entry for `policy_arg` run in `cwd` (absolute) by this euid. The name only
    spreads entries out (one per policy file and working directory): whether an entry applies is
    decided by comparing its whole key (`confine.plan_cache`). Here, beside `cache_dir`, so that
    `sandboy run` can see there is none without importing the plan cache: a run with no entry asks
    it only once the policy is loaded and may be kept (`policy.resolve.plan_may_keep`)."""
    name = f"{os.geteuid()}\0{os.path.abspath(policy_arg)}\0{cwd}".encode("utf-8", "surrogateescape")
    return os.path.join(plans_dir(), _imp.source_hash(_PLAN_NAME_KEY, name).hex() + ".plan")
