"""Compile a policy once, in the parent, into a plan the child runs before execve.

A plan is a list of raw system calls (see `_libc`): the child runs it and execs, so with the C
executor no Python runs between fork and exec. Order (issue #2): signals → fds → rlimits →
capabilities → no_new_privs → Landlock → seccomp. Seccomp goes last so the calls the earlier
steps need are never filtered; the working directory and stdio are set first, per run.
"""

import os

from sandboy.confine import _libc, hygiene, landlock, seccomp
from sandboy.errors import CageError, PolicyError
from sandboy.policy.resolve import Context, is_glob, resolve, uses_tmp


class Cage:
    """A policy compiled for this kernel: a filled Landlock ruleset fd, a BPF program, the plan
    that applies them, an environment and a report of what is enforced and what degraded."""

    def __init__(self, policy, ctx, ruleset, bpf, env, enforced, degraded, warnings, drop_caps):
        self.policy = policy
        self.ctx = ctx
        self.ruleset = ruleset
        self.bpf = bpf
        self.env = env
        self.enforced = enforced
        self.degraded = degraded
        self.warnings = warnings
        self.drop_caps = drop_caps
        # Set by build() unless the policy has glob denies (matched anew at every launch):
        self.fingerprint = None
        self.fingerprint_of = None
        steps = hygiene.plan_rlimits(policy.limits)
        if drop_caps:
            steps += hygiene.plan_drop_capabilities()
        steps += hygiene.plan_no_new_privs() + ruleset.plan()
        seccomp_steps, self._keepalive = seccomp.plan(bpf)
        self._steps = steps + seccomp_steps
        _libc.prepare_buffers(len(bpf))  # the pure-Python executor then makes no types in the child

    @property
    def cwd(self) -> str:
        return self.ctx.cwd

    def plan(self, stdio=(None, None, None)) -> list:
        """The child's system calls for one run: stdio, working directory, then the cage."""
        steps = [(f"redirect fd {target}", (_libc.SYS_DUP2, False, fd, target))
                 for target, fd in enumerate(stdio) if fd is not None and fd != target]
        steps.append((f"enter {self.cwd}", (_libc.SYS_CHDIR, False, os.fsencode(self.cwd) + b"\0")))
        return steps + hygiene.plan_signals() + hygiene.plan_cloexec() + self._steps

    def still_valid(self) -> bool:
        """True when a rebuild now would give the same rules (same inodes behind every policy
        path, same entries in every split directory), so this cage may run the command again."""
        return self.fingerprint is not None and _fingerprint(*self.fingerprint_of) == self.fingerprint

    def exec_args(self, argv) -> tuple:
        """(candidate paths, argv, envp) as bytes: PATH is searched inside the cage, by the
        child, as execvp(3) would, so a directory the cage refuses is skipped like a miss."""
        name = os.fsencode(argv[0])
        if b"/" in name:
            paths = [name]
        else:
            search = self.env.get("PATH", "/usr/local/bin:/usr/bin:/bin")
            paths = [os.path.join(os.fsencode(d) or b".", name) for d in search.split(":")]
        envp = [os.fsencode(f"{k}={v}") for k, v in self.env.items()]
        args = [os.fsencode(a) for a in argv]
        if any(b"\0" in item for item in (*paths, *args, *envp)):
            raise ValueError("argv and environment must not contain NUL bytes")
        return paths, args, envp

    def describe_failure(self, index: int, err: int, stdio=(None, None, None), first=()) -> str:
        """Name the plan step a child reported as failed; `first`: (label, step) pairs the
        launcher ran before the cage's own plan."""
        labels = [label for label, _ in (*first, *self.plan(stdio))]
        label = labels[index] if 0 <= index < len(labels) else f"step {index}"
        return f"cannot apply the cage: {label}: {os.strerror(err)}"

    def apply_here(self) -> None:
        """Apply the cage to THIS process (exec mode). Raises CageError naming the failed step."""
        plan = self.plan()
        try:
            _libc.apply_plan([step for _, step in plan])
        except OSError as exc:
            raise CageError(self.describe_failure(exc.filename, exc.errno)) from None

    def close(self) -> None:
        """In the parent, when no more children will be started from this cage."""
        self.ruleset.close()
        if self.ctx.tmp:
            from sandboy.confine.cleanup import remove_tree

            remove_tree(self.ctx.tmp)

    def report(self) -> dict:
        return {
            "policy": self.policy.source,
            "landlock_abi": self.ruleset.abi,
            "enforced": self.enforced,
            "degraded": self.degraded,
            "warnings": self.warnings,
        }


def _own_cache_dir() -> str:
    """Sandboy's cache (parsed policies, compiled adapter components) is never reachable from a
    cage, whatever the policy grants: a command that could write it would widen the next run of
    the same policy, or swap the native code wasmtime loads. Made now if missing, so the deny
    has something to bind to; where it cannot be made, the caged command (same uid, fewer
    rights) cannot make it either."""
    from sandboy.policy.load import cache_dir

    path = os.path.realpath(cache_dir())
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError:
        pass
    return path


def _names(mask: int, table: dict) -> list[str]:
    return [name for name, bit in table.items() if mask & bit]


_FS_NAMES = {name.lower(): getattr(landlock, name) for name in (
    "EXECUTE", "WRITE_FILE", "READ_FILE", "READ_DIR", "REMOVE_DIR", "REMOVE_FILE", "MAKE_CHAR",
    "MAKE_DIR", "MAKE_REG", "MAKE_SOCK", "MAKE_FIFO", "MAKE_BLOCK", "MAKE_SYM", "REFER",
    "TRUNCATE", "IOCTL_DEV")}


def build(policy, cwd=None, repo=None, environ=None, abi=None) -> Cage:
    """Compile `policy` for this kernel. Raises PolicyError (exit 2) or CageError (exit 125)."""
    strict = policy.strict
    warnings: list[str] = []
    degraded: list[str] = []

    if policy.net.domains and not policy.net.unrestricted:
        raise CageError(
            f"{policy.source}: net.domains: the egress proxy (Layer 3) is not in this build; "
            "remove net.domains, or use net.connect_tcp for port-level rules")

    abi = landlock.abi_version() if abi is None else abi
    if abi < 1:
        raise CageError("Landlock is not available on this kernel (needs Linux >= 5.13 with "
                        "landlock in the LSM list); refusing to run unconfined. See `sandboy doctor`.")

    policy_dir = os.path.dirname(os.path.abspath(policy.source)) if os.path.exists(policy.source) else None
    tmp = None
    if uses_tmp(policy):
        import tempfile

        tmp = tempfile.mkdtemp(prefix="sandboy-")
    ctx = Context(cwd=cwd, tmp=tmp, policy_dir=policy_dir, repo=repo)
    try:
        return _build(policy, ctx, abi, strict, environ, warnings, degraded)
    except BaseException:
        if tmp:
            os.rmdir(tmp)  # still empty: nothing has run
        raise


def _build(policy, ctx, abi, strict, environ, warnings, degraded) -> Cage:
    resolved = resolve(policy, ctx)
    fs, net = resolved.fs, resolved.net

    grants: dict[str, int] = {}
    for key, rights in landlock.RIGHT_NAMES.items():
        for path in getattr(fs, key):
            if not os.path.exists(path):
                msg = f"fs.{key}: {path} does not exist"
                if strict:
                    raise PolicyError(policy.source, f"fs.{key}", f"{path} does not exist (compat.landlock = \"strict\")")
                warnings.append(msg + "; skipped")
                continue
            real = os.path.realpath(path)
            grants[real] = grants.get(real, 0) | rights
    for path, rights in landlock.DEVICE_GRANTS:
        if os.path.exists(path):
            grants[path] = grants.get(path, 0) | rights
    if fs.exec:
        # Every dynamically linked program needs EXECUTE on its ELF interpreter (FINDINGS.md).
        for interp in landlock.ELF_INTERPRETERS:
            if os.path.exists(interp):
                real = os.path.realpath(interp)
                grants[real] = grants.get(real, 0) | landlock.EXEC

    cache = _own_cache_dir()
    for path, rights in grants.items():
        if rights & landlock.WRITE_FILE and cache.startswith(path.rstrip("/") + "/"):
            warnings.append(f"fs: Sandboy's own cache {cache} lies inside the write grant {path}: it is denied, "
                            f"which splits {os.path.dirname(cache)} (no new entries there); set "
                            "SANDBOY_CACHE_DIR outside the granted tree to avoid this")
    denies = landlock.expand_denies((*fs.deny, cache), warnings.append)
    split_dirs: list[str] = []
    rules = landlock.plan_rules(grants, denies, warnings.append, split_dirs)
    inputs = (*fs.read, *fs.exec, *fs.write, *fs.deny, cache, *landlock.ELF_INTERPRETERS)
    reusable = not any(is_glob(d) for d in fs.deny)

    handled_fs = landlock.fs_rights_for(abi)
    for right, since in ((landlock.REFER, 2), (landlock.TRUNCATE, 3), (landlock.IOCTL_DEV, 5)):
        if abi < since:
            degraded.append(f"landlock: {_names(right, _FS_NAMES)[0]} needs ABI {since} (kernel has {abi}): not restricted")

    handled_net = 0
    connect_ports, bind_ports = net.connect_tcp, net.bind_tcp
    any_inet = bool(connect_ports or bind_ports or net.udp)
    if not net.unrestricted:
        if abi >= 4:
            handled_net = landlock.NET_BIND_TCP | landlock.NET_CONNECT_TCP
        elif connect_ports or bind_ports:
            degraded.append(f"net: TCP port rules need Landlock ABI 4 (kernel has {abi}): "
                            "every TCP port is reachable")
            connect_ports = bind_ports = ()
    scoped = 0
    if abi >= 6:
        scoped = landlock.SCOPE_ABSTRACT_UNIX_SOCKET | landlock.SCOPE_SIGNAL
    else:
        warnings.append(f"landlock: abstract-socket and signal scopes need ABI 6 (kernel has {abi})")

    # listen() on a TCP socket that was never bound picks an ephemeral port on every address
    # without a bind() call, and Landlock (ABI 7, Linux 6.18) does not check that autobind:
    # `bind_tcp = []` still let a command serve on 0.0.0.0:<ephemeral> (tests/cage/test_net.py).
    # Seccomp cannot tell a bound socket from an unbound one, so `listen` is refused where no
    # listener can be legitimate (no TCP bind port, no AF_UNIX sockets); elsewhere it degrades.
    listen_autobind = bool(handled_net and any_inet)
    deny_listen = listen_autobind and not bind_ports and not net.unix
    if listen_autobind and not deny_listen:
        degraded.append("net: listen() on a TCP socket never bound takes an ephemeral port that "
                        f"Landlock (ABI {abi}) does not check; it is refused only when bind_tcp is empty "
                        "and unix = false")

    if degraded and strict:
        raise CageError(f"{policy.source}: compat.landlock = \"strict\" and this kernel cannot enforce: "
                        + "; ".join(degraded))

    deny_calls = seccomp.denied_calls(policy)
    if deny_listen:
        deny_calls.add("listen")
    sockets = seccomp.SocketRules(
        unix=net.unix or net.unrestricted,
        inet=net.unrestricted or any_inet,
        udp=net.udp or net.unrestricted,
        tcp_any_protocol=net.unrestricted,
    )
    bpf = seccomp.build(deny_calls, sockets)

    try:
        ruleset = landlock.build_ruleset(abi, rules, handled_fs, handled_net, connect_ports, bind_ports,
                                         scoped, warnings.append)
    except OSError as exc:
        raise CageError(f"landlock: cannot build the ruleset: {exc.strerror}") from None

    drop_caps = hygiene.has_capabilities()
    source_env = os.environ if environ is None else environ
    env = {name: source_env[name] for name in policy.env.pass_ if name in source_env}
    env.update(policy.env.set)
    if ctx.tmp and "TMPDIR" not in env:
        # The private {tmp} is granted, so say where it is: tempfile, mktemp and pytest read
        # TMPDIR and would otherwise try /tmp, which a policy rarely grants.
        env["TMPDIR"] = ctx.tmp

    enforced = {
        "landlock": {
            "abi": abi,
            "fs_rules": [[path, _names(rights & handled_fs, _FS_NAMES)] for path, rights in rules],
            "fs_denied": denies,
            "tcp_connect": list(connect_ports) if handled_net else "any",
            "tcp_bind": list(bind_ports) if handled_net else "any",
            "scopes": _names(scoped, {"abstract_unix_socket": 1, "signal": 2}),
        },
        "seccomp": {
            "denied_syscalls": sorted(deny_calls),
            "instructions": len(bpf) // 8,
            "native_arch_only": True,
            "sysv_ipc": "allowed" if policy.ipc.sysv else "refused",
            "sockets": {"unix": sockets.unix, "inet": sockets.inet, "udp": sockets.udp,
                        "mptcp_sctp_raw": sockets.tcp_any_protocol},
        },
        "no_new_privs": True,
        "inherited_fds": "closed above 2",
        "env": sorted(env),
        "limits": {k: v for k, v in policy.limits.to_dict().items() if v},
        "capabilities": "dropped" if drop_caps else "none held",
    }
    cage = Cage(policy, ctx, ruleset, bpf, env, enforced, degraded, warnings, drop_caps)
    if reusable:
        cage.fingerprint_of = (inputs, tuple(split_dirs))
        cage.fingerprint = _fingerprint(inputs, split_dirs)
    return cage


_REUSED: dict = {}
_REUSE_MAX = 8


def for_run(policy, cwd=None, repo=None) -> tuple:
    """(cage, owned) for one run of `policy`: a cage compiled earlier in this process when a
    rebuild would give the same rules (see `Cage.still_valid`), else a new one. `owned` cages
    are the caller's to close. This is what makes `sandboy.run(argv, policy)` in a loop cost
    what a prebuilt cage costs (docs/performance.md). Not for policies with a per-run `{tmp}`."""
    if uses_tmp(policy):
        return build(policy, cwd=cwd, repo=repo), True
    here = os.path.abspath(cwd or os.getcwd())
    env = os.environ
    key = (policy, here, os.path.abspath(repo or here), tuple(env.get(n) for n in policy.env.pass_),
           env.get("HOME"), env.get("SANDBOY_CACHE_DIR"), env.get("XDG_CACHE_HOME"), os.geteuid())
    cage = _REUSED.pop(key, None)
    if cage is not None:
        if cage.still_valid():
            _REUSED[key] = cage  # most recently used last
            return cage, False
        cage.close()
    cage = build(policy, cwd=cwd, repo=repo)
    if cage.fingerprint is None:
        return cage, True
    _REUSED[key] = cage
    while len(_REUSED) > _REUSE_MAX:
        _REUSED.pop(next(iter(_REUSED))).close()
    return cage, False


def _stat_key(path: str):
    try:
        st = os.stat(path)  # follows symlinks, as the rules do
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mode


def _fingerprint(inputs, split_dirs) -> tuple:
    """What a rebuild's rules depend on in the filesystem: which inode each policy path leads
    to (or that it is missing), and the entries of each directory split around a deny."""
    listing = []
    for directory in split_dirs:
        try:
            # unsorted: an unchanged directory lists in the same order; a reorder only rebuilds
            listing.append((directory, _stat_key(directory), tuple(os.listdir(directory))))
        except OSError:
            listing.append((directory, None, ()))
    return tuple(_stat_key(p) for p in inputs), tuple(listing)
