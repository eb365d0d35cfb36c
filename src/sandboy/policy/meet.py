"""meet(step, ceiling): the most a gate step may do, given what it asks and what the operator allows.

The repository writes the step policy; the operator writes the ceiling. The result never grants
anything the ceiling does not, and every place where the step asked for more is returned as a
`Narrowing` so that the runner can print it ("step unit asked for network to example.com; ...").

Both policies must already be resolved (`policy.resolve`) in the same context, so that `.` means
`{repo}` on both sides and `{tmp}` stays a literal token compared as its own root.

Paths are compared after following symlinks: Landlock grants the inode a rule's path opens to, so a
step asking to read `{repo}/link` where `link -> /root` asks for `/root`. The result carries the
symlink-free path, which is what the cage will grant. Compute the meet right before a step runs:
an earlier step may have planted the symlink.
"""

from __future__ import annotations

import os

from sandboy.policy.model import (LIMIT_KEYS, SECTIONS, Compat, EnvRules, FsRules, IpcRules, Limits, NetRules, Policy,
                                  SeccompRules)
from sandboy.policy.resolve import TMP_TOKEN, is_glob, is_within, unfollowable



class Narrowing:
    """One thing a step asked for and did not get. `text` reads after "step NAME "."""

    __slots__ = ("section", "key", "asked", "text")

    def __init__(self, section: str, key: str, asked, text: str):
        self.section = section
        self.key = key
        self.asked = asked
        self.text = text

    def for_step(self, name: str) -> str:
        return f"step {name} {self.text}"

    def to_dict(self) -> dict:
        asked = list(self.asked) if isinstance(self.asked, tuple) else self.asked
        return {"section": self.section, "key": self.key, "asked": asked, "text": self.text}

    def __repr__(self):
        return f"Narrowing({self.text!r})"


# --- paths -------------------------------------------------------------------------------


def _real(path: str) -> str:
    """The symlink-free form of a resolved policy path; `{tmp}` paths are made per run."""
    if path.startswith(TMP_TOKEN):
        return path
    return os.path.realpath(path)


def _within(path: str, root: str) -> bool:
    # `{tmp}` paths do not start with "/" here, yet live under / at run time
    return root == "/" or is_within(path, root)


class _Grants:
    """The ceiling's paths for one right, symlink-resolved once."""

    def __init__(self, paths):
        self.paths = tuple(dict.fromkeys(_real(p) for p in paths))

    def covers(self, path: str) -> bool:
        return any(_within(path, root) for root in self.paths)

    def beneath(self, path: str) -> list:
        """The ceiling's roots strictly under `path`, without those another one already covers."""
        roots = [root for root in self.paths if root != path and _within(root, path)]
        return [r for r in roots if not any(o != r and o != "/" and _within(r, o) for o in roots)]


def _meet_fs(step: FsRules, ceiling: FsRules, out: list) -> FsRules:
    any_right = _Grants((*ceiling.read, *ceiling.exec, *ceiling.write))
    grants = {"write": _Grants(ceiling.write), "exec": _Grants(ceiling.exec), "read": any_right}
    denied = [_real(p) for p in ceiling.deny if not is_glob(p)]
    # dicts as ordered sets: a hostile gate's step policy may list tens of thousands of paths,
    # and `root not in list` made the meet quadratic (40,000 paths: 20 s before any step ran)
    result: dict = {"read": {}, "exec": {}, "write": {}}

    def place(right: str, real: str) -> tuple:
        """(covered, roots kept) for one path at one right; roots are added to the result."""
        if grants[right].covers(real):
            roots = [real]
        else:
            roots = grants[right].beneath(real)
        result[right].update(dict.fromkeys(roots))
        return roots == [real], roots

    for right in ("write", "exec", "read"):
        for asked in getattr(step, right):
            real = _real(asked)
            covered, roots = place(right, real)
            if covered:
                continue
            granted = [f"{right} only on {', '.join(roots)} beneath it"] if roots else []
            if right != "read":
                # write and exec include read: keep the read part (the lattice meet), so that
                # "write /etc" under a ceiling "read /etc" becomes "read /etc", not nothing.
                covered_r, roots_r = place("read", real)
                if covered_r:
                    granted.append("read")
                elif roots_r:
                    granted.append(f"read only on {', '.join(roots_r)} beneath it")
            text = f"the ceiling allows {' and '.join(granted)}" if granted else "the ceiling does not allow it"
            out.append(Narrowing("fs", right, asked, f"asked to {right} {asked}; {text}"))

    # A grant at or under a path the ceiling denies is dropped outright: the cage splits a
    # granted directory around a deny, but a rule naming the denied path itself would win.
    for right, paths in result.items():
        for path in list(paths):
            hit = next((d for d in denied if _within(path, d)), None)
            if hit is not None:
                del paths[path]
                out.append(Narrowing("fs", right, path, f"asked to {right} {path}; the ceiling denies {hit}"))
    deny = tuple(dict.fromkeys((*ceiling.deny, *step.deny)))

    # Protections only add up: a step may protect more, never less than the ceiling. A write
    # grant on a protected path stays in the result (the cage makes the path read-only) and
    # is reported, so the step's author sees why writes there fail.
    protect = tuple(dict.fromkeys((*ceiling.protect, *step.protect)))
    protected = [_real(p) for p in ceiling.protect]
    for path in result["write"]:
        hit = next((p for p in protected if _within(path, p)), None)
        if hit is not None:
            out.append(Narrowing("fs", "write", path, f"asked to write {path}; the ceiling protects {hit} "
                                 "(read-only)"))
    if ceiling.protect_defaults and not step.protect_defaults:
        out.append(Narrowing("fs", "protect_defaults", False, "asked to turn off fs.protect_defaults; the ceiling "
                             "protects the default paths (.git/config, .git/hooks, start-up files)"))
    return FsRules(read=tuple(result["read"]), exec=tuple(result["exec"]), write=tuple(result["write"]), deny=deny,
                   protect=protect, protect_defaults=ceiling.protect_defaults or step.protect_defaults)


# --- network -----------------------------------------------------------------------------


def domain_allowed(entry: str, patterns) -> bool:
    """Does some ceiling pattern allow every (host, port) that the step's `entry` matches?"""
    from sandboy.egress.rules import meet_domains

    return bool(meet_domains((entry,), tuple(patterns))[0])


def _cidr_allowed(cidr: str, allowed) -> bool:
    import ipaddress

    net = ipaddress.ip_network(cidr, strict=False)
    for other in allowed:
        parent = ipaddress.ip_network(other, strict=False)
        if net.version == parent.version and net.subnet_of(parent):
            return True
    return False


def _meet_net(step: NetRules, ceiling: NetRules, out: list) -> NetRules:
    if ceiling.unrestricted:
        return step
    if step.unrestricted:
        out.append(Narrowing("net", "unrestricted", True, "asked for unrestricted network; the ceiling does not allow "
                             "it; kept only what the ceiling grants"))
        return ceiling

    def ports(key: str, what: str) -> tuple:
        kept = []
        for port in getattr(step, key):
            if port in getattr(ceiling, key):
                kept.append(port)
            else:
                out.append(Narrowing("net", key, port, f"asked to {what} TCP port {port}; the ceiling does not allow it"))
        return tuple(kept)

    def flag(key: str, what: str) -> bool:
        if getattr(step, key) and not getattr(ceiling, key):
            out.append(Narrowing("net", key, True, f"asked for {what}; the ceiling does not allow it"))
            return False
        return getattr(step, key)

    def listed(key: str, allowed, what: str) -> tuple:
        kept = []
        for entry in getattr(step, key):
            if allowed(entry, getattr(ceiling, key)):
                kept.append(entry)
            else:
                out.append(Narrowing("net", key, entry, f"asked for {what} {entry}; the ceiling does not allow it"))
        return tuple(kept)

    return NetRules(
        connect_tcp=ports("connect_tcp", "connect to"),
        bind_tcp=ports("bind_tcp", "bind"),
        udp=flag("udp", "UDP sockets"),
        unix=flag("unix", "unix sockets"),
        domains=listed("domains", domain_allowed, "network to"),
        private=listed("private", _cidr_allowed, "network to private range"),
        # deny only ever narrows: the step's and the ceiling's both apply
        domains_deny=tuple(dict.fromkeys((*ceiling.domains_deny, *step.domains_deny))),
        unrestricted=False,
    )


# --- the rest ----------------------------------------------------------------------------


def _meet_ipc(step: IpcRules, ceiling: IpcRules, out: list) -> IpcRules:
    if step.sysv and not ceiling.sysv:
        out.append(Narrowing("ipc", "sysv", True, "asked for SysV IPC (shm/msg/sem); the ceiling does not allow it"))
    return IpcRules(sysv=step.sysv and ceiling.sysv)


def _meet_seccomp(step: SeccompRules, ceiling: SeccompRules, out: list) -> SeccompRules:
    deny = tuple(dict.fromkeys((*ceiling.deny, *step.deny)))
    allow = []
    for name in step.allow:
        if name in ceiling.allow and name not in deny:
            allow.append(name)
        else:
            out.append(Narrowing("seccomp", "allow", name, f"asked to allow system call {name}; the ceiling does not "
                                 "allow it"))
    return SeccompRules(deny=deny, allow=tuple(allow))


def _meet_env(step: EnvRules, ceiling: EnvRules, out: list) -> EnvRules:
    passed = []
    ceiling_sets = {name for name, _ in ceiling.set}
    for name in step.pass_:
        if name in ceiling.pass_:
            passed.append(name)
        elif name not in ceiling_sets:  # the ceiling gives it a value of its own: nothing lost
            out.append(Narrowing("env", "pass", name, f"asked to pass environment variable {name}; the ceiling does "
                                 "not pass it"))
    # Values the step sets come from the repository itself (it could `export` them in its own
    # script), so they add no capability; the operator's values win where both set a name.
    merged = dict(step.set)
    for name, value in ceiling.set:
        if name in merged and merged[name] != value:
            out.append(Narrowing("env", "set", name, f"asked to set {name}; the ceiling sets it and wins"))
        merged[name] = value
    return EnvRules(pass_=tuple(passed), set=tuple(merged.items()))


def _meet_limits(step: Limits, ceiling: Limits, out: list) -> Limits:
    # The model cannot tell `processes = 0` from an absent key, so 0 means "as the ceiling" here
    # (like an absent section) and only an explicit number above the cap is reported.
    values = {}
    for key in LIMIT_KEYS:
        asked, cap = getattr(step, key), getattr(ceiling, key)
        if asked == 0:
            values[key] = cap
        elif cap and asked > cap:
            out.append(Narrowing("limits", key, asked, f"asked for limits.{key} = {asked}; the "
                                 f"ceiling caps it at {cap}"))
            values[key] = cap
        else:
            values[key] = asked
    return Limits(**values)


def _meet_compat(step: Compat, ceiling: Compat, out: list) -> Compat:
    strict = "strict" in (step.landlock, ceiling.landlock)
    return Compat(landlock="strict" if strict else "best-effort")


_MEETS = {"fs": _meet_fs, "net": _meet_net, "ipc": _meet_ipc, "seccomp": _meet_seccomp, "env": _meet_env, "limits": _meet_limits,
          "compat": _meet_compat}


def meet(step: Policy, ceiling: Policy) -> tuple:
    """(policy, narrowings): `step` narrowed by `ceiling`. A section the step leaves out is the ceiling's."""
    narrowings: list = []
    fields = {}
    for name in SECTIONS:
        if name in step.sections:
            try:
                fields[name] = _MEETS[name](getattr(step, name), getattr(ceiling, name), narrowings)
            except OSError as exc:  # a path's symlink cannot be read (fs): say whose and which
                raise (unfollowable(exc, ceiling.source, ceiling.fs) or unfollowable(exc, step.source, step.fs)
                       or exc) from None
        else:
            fields[name] = getattr(ceiling, name)
    policy = Policy(version=1, sections=frozenset(SECTIONS), source=f"{step.source} under {ceiling.source}", **fields)
    return policy, narrowings
