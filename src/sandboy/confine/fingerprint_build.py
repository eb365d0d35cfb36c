"""The build side of `fingerprint.Fingerprint`: taking one (`take`, what `Fingerprint(...)` runs),
the stats a build takes before it decides its rules (`stats_before`, `protected_watch`), and the
check's slow way, the protected paths resolved anew (`resolved_unchanged`). Apart from
fingerprint.py, which a plan cache hit reads to check a kept fingerprint and never runs any of
this (≈ 10 kB of code: the run path's bundle reads a module whole, ADR 0023; session 12).
"""

import os
import stat
import time

from sandboy.confine.fingerprint import ctime_settled, identities, protected_environment, stat_key


def stats_before(fs) -> dict:
    """{path: stat_key} of a resolved policy's own paths, taken before its rules are decided (see
    `Fingerprint`'s `before`): what a fingerprint then holds for them instead of later stats. A path
    under two keys (the README example's "." is read and write; a preset's directory read and exec:
    44 paths, 35 distinct) is stat'ed once."""
    return {path: stat_key(path) for path in dict.fromkeys((*fs.read, *fs.exec, *fs.write, *fs.deny, *fs.protect))}


def take(fp, inputs, split_dirs, protected_args, protected, before=None, watch_before=None, globs=()) -> None:
    """`Fingerprint(...)`: fill `fp` with what a build's rules depend on now (see the class)."""
    fp.inputs = tuple(dict.fromkeys(inputs))  # (a path named by two keys is looked up once)
    # `before`: {path: stat_key} of the policy's own paths taken BEFORE the rules were decided
    # (`stats_before`). A fingerprint taken after them described a deny file made while the
    # cage was built (absent for `expand_denies`, present now): the rules granted it and every
    # later check said "unchanged" (redcage9). Stats older than every decision make any change
    # since show at the next check.
    fp._input_keys = (fp._inputs_now() if before is None else
                      tuple(before[p] if p in before else stat_key(p) for p in fp.inputs))
    clock = time.time_ns()
    fp._split = []  # [directory, stat_key, listing, identity settled at `now` or None]
    for directory in split_dirs:
        # (directory, (clock, stat, names)): the stat and the listing the rules were decided from
        # (`landlock.plan_rules(listed=)`), else (a path: a caller that did not keep them) taken now
        directory, taken = directory if type(directory) is tuple else (directory, None)
        try:
            if taken is None:
                now, st = clock, os.stat(directory)
                listing = tuple(os.listdir(directory))
            else:
                now, st, listing = taken
        except OSError:
            fp._split.append([directory, None, (), None])
            continue
        ident = (st.st_dev, st.st_ino, st.st_mode, st.st_ctime_ns)
        fp._split.append([directory, ident[:3], listing, ident if ctime_settled(st.st_ctime_ns, now) else None])
    # the directories the deny globs looked into, as they were before each was looked into
    # (`deny_globs.GlobWatch.state`: settled when taken), so a glob's matches need no new walk
    fp._globs = tuple(globs)
    fp.protected_args = tuple(protected_args)
    fp._protected = protected  # protections.protected_paths(*protected_args) as the build found them
    fp._watch = fp._watched = fp._installed = fp._env = None
    if watch_before is not None and watch_before[0] == fp.protected_args:
        # what decided the build's own resolution, stat'ed BEFORE it (`protected_watch`,
        # taken by `cage.build`): trusted where settled then, so the first check — a plan
        # cache entry's, after the building run — only stats again, as every later one
        fp._install = watch_before[1]
        trust(fp, watch_before[2])
        return
    write_roots = protected_args[0]
    fp._install = None
    if write_roots and protected_args[2]:
        from sandboy.confine import own_install

        fp._install = own_install.candidates_to_watch(write_roots)
    # No stats yet: the first check resolves anew (and takes them, before resolving), so the
    # build itself pays one resolution, and a cage never reused none more.


def trust(fp, taken) -> None:
    """Keep `taken` (`_watch_now`'s, from before a resolution that gave `fp._protected`) in `fp` as
    what decides the protected paths, where every stat in it was settled when it was taken (a
    later change of any of them must then show: TICK_NS) and no path looked up is a symlink."""
    now, env, watch, watched, installed = taken
    if (watch is not None
            and all(st is None or (ctime_settled(st[5], now) and not stat.S_ISLNK(st[2]))
                    for st in watched[:len(watch[0])])
            and all(st is None or ctime_settled(st[5], now) for st in watched[len(watch[0]):])):
        fp._watch, fp._watched, fp._installed, fp._env = watch, watched, installed, env


def resolved_unchanged(fp, managers=None) -> bool:
    """`Fingerprint.unchanged`'s slow way: the protected paths resolved anew and compared with the
    build's (the stats of what decides them taken again first, BEFORE the resolution, so that a
    change made meanwhile shows at the next check)."""
    from sandboy.confine import protections
    from sandboy.confine.protected import launch_reads

    write_roots, explicit, defaults = fp.protected_args[:3]
    taken = _watch_now(fp.protected_args, fp._install)
    if protections.protected_paths(*fp.protected_args, managers=managers) != fp._protected:
        return False
    fp._watch = fp._watched = None
    watch = taken[2]
    if watch is None or launch_reads(write_roots, explicit, defaults) == watch:
        trust(fp, taken)
    return True


def _path_dirs_protected(protected_args, lookups=None) -> bool:
    """Whether directories of the operator's PATH are protected inside the write roots
    (`confine.path_dirs`): no short list of stats decides those (a symlink on the way to one,
    one made again where missing), so such a cage's protected paths are resolved at each
    check, as before. Where none is (the usual gate: a PATH directory in the repository is
    the run's own work), the PATH's text is kept with the stats (`_environment`): another PATH
    resolves anew."""
    if not protected_args[2] or len(protected_args) < 4:
        return False
    from sandboy.confine.path_dirs import on_path

    return bool(on_path(protected_args[0], protected_args[3], lookups=lookups)[0])


def _watch_now(protected_args, install, lookups=None) -> tuple:
    """(the clock, `protected_environment()`, `launch_reads`' (looked up, read) or None, their stats, the
    installation rows present) — in that order, each taken before the next: what decides the
    protected paths of `protected_args` now, to be taken BEFORE a resolution whose answer they
    then vouch for (`trust`). `lookups`: the build's (`protected_watch`); a check passes none."""
    from sandboy.confine.protected import launch_reads

    write_roots, explicit, defaults = protected_args[:3]
    now = time.time_ns()
    env = protected_environment()
    watch = None if _path_dirs_protected(protected_args, lookups) else launch_reads(write_roots, explicit, defaults,
                                                                                     lookups)
    watched = None if watch is None else identities(watch[0], os.lstat) + identities(watch[1], os.stat)
    installed = None
    if install is not None:
        installed = []
        if install:
            from sandboy.confine import own_install

            installed = own_install.present(install)
    return now, env, watch, watched, installed


def protected_watch(protected_args, lookups=None):
    """What `Fingerprint(..., watch_before=)` takes: `_watch_now` for a cage with write roots,
    called by the build BEFORE it resolves the protected paths (`protections.protected_paths`),
    or None (no write root: nothing to watch). The miss of a plan cache then writes its entry
    after the run from these stats compared again, instead of resolving the protected paths a
    second time (≈ 0.5-1.3 ms: docs/performance.md, "Session 10 — write-root runs"). `lookups`: the
    build's `resolve.BuildLookups`, which its resolution then asks too: the watch and the resolution
    see the same write roots, each resolved once (taken after `stats_before`: see there)."""
    protected_args = tuple(protected_args)
    if not protected_args[0] or protected_args[1]:
        return None  # no write root; or fs.protect entries, which no short list decides (resolved at every check)
    install = None
    if protected_args[2]:
        from sandboy.confine import own_install

        install = own_install.candidates_to_watch(protected_args[0], lookups)
    return protected_args, install, _watch_now(protected_args, install, lookups)
