"""`sandboy doctor`: probe each protection on this machine, and say what it can enforce.

Probes run in forked children so nothing sticks to the calling process.
"""

from __future__ import annotations

import os


def _in_child(fn) -> bool:
    """Run `fn` in a forked child; True when it returned without raising."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fn()
            code = 0
        except BaseException:  # noqa: BLE001 - a probe failing is the answer, not an error
            pass
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _seccomp_probe() -> None:
    from sandboy.confine import _libc, hygiene, seccomp

    steps, keepalive = seccomp.plan(seccomp.build(("ptrace",), seccomp.SocketRules(True, True, True, True)))
    _libc.apply_plan([step for _, step in hygiene.plan_no_new_privs() + steps])


def _userns_probe() -> None:
    from sandboy.confine._libc import syscall

    syscall(272, 0x10000000 | 0x40000000)  # unshare(CLONE_NEWUSER | CLONE_NEWNET)


def _pids_cgroup_probe() -> None:
    from sandboy.confine.cgroup import PidsCgroup

    group = PidsCgroup.create(8)
    if group is None:
        raise OSError("no pids cgroup")
    group.remove()


def _memory_cgroup_probe() -> None:
    from sandboy.confine.cgroup import MemoryCgroup

    if not MemoryCgroup.available():
        raise OSError("no memory cgroup")


def _memory_swap_probe() -> None:
    from sandboy.confine.cgroup import MemoryCgroup

    group = MemoryCgroup.create(64)
    if group is None:
        raise OSError("no memory cgroup")
    try:
        if not group.swap_bounded:
            raise OSError("swap is not accounted")
    finally:
        group.remove()


def _namespace_tier() -> tuple:
    from sandboy.confine import namespaces

    return namespaces.availability()


def _libc_implementation() -> str:
    from sandboy.confine import _libc

    return _libc.IMPLEMENTATION


def _close_range_probe() -> bool:
    """close_range(CLOSE_RANGE_CLOEXEC) tried on a range no process has open (the same probe the
    cage uses to choose between it and closing fds one by one)."""
    from sandboy.confine.hygiene import close_range_cloexec_works

    return close_range_cloexec_works()


def repository_notes(cwd: str) -> list:
    """What a run granted the repository `cwd` lies in could leave for the operator's next
    commit that no protection stops: a pre-commit hook running an interpreter inside it (ADR
    0019, session 7) — the launch of such a run warns too; here before any run."""
    top = os.path.realpath(cwd)
    while not os.path.isdir(os.path.join(top, ".git")):
        if os.path.dirname(top) == top:
            return []
        top = os.path.dirname(top)
    from sandboy.confine.hook_python import launch_warnings

    return [f"repository {top}, if a run may write it: " + warning.removeprefix("fs: ")
            for warning in launch_warnings([top])]


def check() -> dict:
    from sandboy.confine import landlock

    abi = landlock.abi_version()
    root = os.geteuid() == 0
    protections = {
        "landlock_fs": abi >= 1,
        "landlock_refer": abi >= 2,
        "landlock_truncate": abi >= 3,
        "landlock_tcp_ports": abi >= 4,
        "landlock_ioctl_dev": abi >= 5,
        "landlock_scopes": abi >= 6,
        "seccomp_filter": _in_child(_seccomp_probe),
        "close_range": _close_range_probe(),
        "native_executor": _libc_implementation() == "native",
        "pidfd": hasattr(os, "pidfd_open"),
        "pids_cgroup": _in_child(_pids_cgroup_probe) if root else None,
        "memory_cgroup": _in_child(_memory_cgroup_probe) if root else False,
        # swap accounted in memory cgroups: a step's bound then covers swap too (ADR 0027)
        "memory_cgroup_swap": _in_child(_memory_swap_probe) if root else False,
        "user_namespaces": _in_child(_userns_probe),
        "namespace_tier": _namespace_tier()[0],
    }
    notes = []
    if abi < 4:
        notes.append("TCP port rules need Landlock ABI 4: with net.connect_tcp/bind_tcp the cage degrades "
                     "(strict policies are refused)")
    if abi < 6:
        notes.append("abstract unix sockets and signals are not scoped (Landlock ABI < 6)")
    if abi < 9:
        notes.append("Landlock does not restrict connect() to pathname unix sockets: keep net.unix = false "
                     "(seccomp then refuses socket(AF_UNIX))")
    if root:
        notes.append("running as root: capabilities are dropped in the cage; limits.processes uses a pids "
                     "cgroup (RLIMIT_NPROC does not bind uid 0)")
    if not protections["memory_cgroup"]:
        notes.append("no memory cgroup can be made (needs root and a writable memory controller): a gate "
                     "step's limits.memory_mib is RLIMIT_AS per process where a policy asks for it, and the "
                     "built-in ceiling's default memory bound is not enforced (ADR 0027)")
    if protections["memory_cgroup"] and not protections["memory_cgroup_swap"]:
        from sandboy.confine.cgroup import host_has_swap

        if host_has_swap():
            notes.append("swap is not accounted in memory cgroups here (swapaccount=0 or "
                         "cgroup.memory=noswap) and the host has swap: a gate step may spill past its "
                         "limits.memory_mib into swap (ADR 0027)")
    if not protections["namespace_tier"]:
        from sandboy.confine import namespaces

        notes.append(f"the namespace tier is unavailable ({_namespace_tier()[1]}): best-effort policies run "
                     "without it and do not prevent: " + "; ".join(namespaces.LOST_WITHOUT.values())
                     + "; strict policies are refused (exit 125)")
    if not protections["user_namespaces"]:
        notes.append("unprivileged user namespaces are unavailable: Layer 3 (private network) will not work")
    from sandboy.egress.enforcement import egress_mode

    egress = egress_mode(protections["namespace_tier"], abi) or "unavailable"
    if egress != "namespace":
        notes.append("net.domains (Layer 3): " + ("WEAKER fallback: the proxy on a host loopback port and a Landlock "
                     "rule for that port only (the same port on any other address stays reachable); strict "
                     "policies are refused (exit 125)" if egress == "landlock-fallback" else
                     "not enforceable here (no network namespace, no Landlock TCP rules): refused (exit 125)"))
    notes.extend(repository_notes(os.getcwd()))
    import sandboy

    finder = sandboy.bundle_finder()
    bundle = None if finder is None else {"path": sandboy.bundle_path(finder.package_dir),
                                          "modules": len(finder.index), "stale": finder.stale()}
    if bundle is None:
        notes.append("no byte-code bundle of the run path is in use (`make compile` writes it in a checkout, the "
                     "wheel carries it): `sandboy run` starts ≈ 0.5 ms slower (docs/adr/0023)")
    elif bundle["stale"]:
        notes.append("changed since the byte-code bundle was written, imported the usual way: "
                     + ", ".join(bundle["stale"]) + " (`make compile` rewrites the bundle)")
    from sandboy import cache_seal
    from sandboy.confine import plan_cache

    sealed = cache_seal.secret() is not None
    return {
        "kernel": os.uname().release,
        "landlock_abi": abi,
        "root": root,
        "protections": protections,
        "cage_available": abi >= 1 and protections["seccomp_filter"],
        "egress": egress,
        "bytecode_bundle": bundle,
        # ADR 0028: where `sandboy run` keeps compiled plans, or None where it keeps none
        "plan_cache": plan_cache.directory() if plan_cache.enabled() and sealed else None,
        # ADR 0030: whether Sandboy's cache is used at all (its files sealed with this user's key)
        "cache": cache_seal.status(),
        "notes": notes,
    }


def render(result: dict) -> str:
    lines = [f"kernel {result['kernel']}, Landlock ABI {result['landlock_abi']}"
             + (", running as root" if result["root"] else "")]
    for name, ok in result["protections"].items():
        mark = "n/a" if ok is None else ("yes" if ok else "NO")
        lines.append(f"  {name:<20} {mark}")
    lines.append("cage: " + ("available" if result["cage_available"]
                             else "NOT available: `sandboy run` will refuse (exit 125)"))
    egress = result.get("egress")
    if egress:
        lines.append("egress (net.domains): " + {"namespace": "private network namespace + proxy",
                                                 "landlock-fallback": "WEAKER fallback (Landlock port rule + proxy)",
                                                 "unavailable": "unavailable (refused, 125)"}[egress])
    bundle = result.get("bytecode_bundle")
    if bundle:
        lines.append(f"start-up: {bundle['modules'] - len(bundle['stale'])} of {bundle['modules']} run-path modules "
                     f"served from {bundle['path']}")
    if "cache" in result:
        lines.append("cache: " + result["cache"])
    if "plan_cache" in result:
        lines.append("plan cache (sandboy run): " + (result["plan_cache"] or f"off ({_why_no_plan_cache(result)})"))
    lines.extend(f"note: {n}" for n in result["notes"])
    return "\n".join(lines)


def _why_no_plan_cache(result: dict) -> str:
    """Why `sandboy run` keeps no plans here: asked in the order `doctor()` decides it (without
    the keyring the cache is off whatever else holds — it used to say "no C executor" there)."""
    if os.environ.get("SANDBOY_PLAN_CACHE") == "0":
        return "SANDBOY_PLAN_CACHE=0"
    if str(result.get("cache", "")).startswith("off"):
        return "the cache is off: no key to seal it with (the cache: line above)"
    return "no C executor"

