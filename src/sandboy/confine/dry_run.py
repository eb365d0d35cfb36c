"""What `sandboy run --dry-run` shows: the cage a policy gets on this kernel, built exactly as the
run would build it, and nothing run — as a report (the `--json` document) or as text.
"""


def report(policy, command: list, cwd=None, tty: bool = False) -> dict:
    """The cage's report, plus how it would be supervised, the terminal, the command and what
    would fail at exec time with a bare 126."""
    from sandboy.confine import explain
    from sandboy.confine.cage import build
    from sandboy.confine.exec_mode import hooks_for, supervisor_needed
    from sandboy.confine.terminal import describe as describe_terminal

    # as `sandboy run` builds it (--tty keeps /dev/tty; `{tmp}` at its fixed mount point under the tier)
    cage = build(policy, cwd=cwd, tty=tty, reusable=False, fixed_tmp=True)
    try:
        out = cage.report()
        out["supervised"] = supervisor_needed(cage, tty=tty, in_place=True, hooks=hooks_for(cage)) is not None
        out["terminal"] = describe_terminal(tty)
        if cage.tier is not None:  # files on fd 0-2: reopened or relayed (ADR 0011, "Session 8")
            out["stdio"] = cage.tier.describe_stdio()
        out["command"] = command
        # What would fail at exec time with a bare 126: PATH entries and interpreter symlinks
        # outside fs.exec, and the command itself.
        out["warnings"] = [*out["warnings"], *explain.path_warnings(cage)]
        if command:
            reason = explain.not_executable(command[0], cage) or explain.skipped(command[0], cage)
            if reason:
                out["warnings"].append(reason)
        return out
    finally:
        cage.close()


def describe(report: dict) -> str:
    """`report` as text, ready to print: every line passes `escape.line` here, where the lines
    are composed — they quote policy paths and the command line, and a line break in one of those
    must stay inside its line (`escape.block` on the joined text would have split it)."""
    from sandboy.escape import line

    enf = report["enforced"]
    ll, sc = enf["landlock"], enf["seccomp"]
    lines = [f"policy {report['policy']} on Landlock ABI {report['landlock_abi']}"
             + (" (supervised)" if report.get("supervised") else " (exec mode)")]
    lines.append(f"filesystem ({len(ll['fs_rules'])} rules):")
    for path, rights in ll["fs_rules"]:
        lines.append(f"  {path}: {', '.join(rights) or '-'}")
    for path in ll["fs_denied"]:
        lines.append(f"  denied: {path}")
    lines.append(f"tcp connect: {ll['tcp_connect'] or 'none'}; tcp bind: {ll['tcp_bind'] or 'none'}")
    lines.append(f"scopes: {', '.join(ll['scopes']) or 'none'}")
    socks = sc["sockets"]
    lines.append("sockets: " + ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in socks.items()))
    lines.append(f"seccomp: {len(sc['denied_syscalls'])} calls denied, {sc['instructions']} BPF instructions, "
                 "native x86_64 only")
    lines.append(f"environment: {', '.join(enf['env']) or 'empty'}")
    lines.append(f"limits: {enf['limits'] or 'none'}; capabilities: {enf['capabilities']}")
    if "terminal" in report:
        lines.append(f"terminal: {report['terminal']}")
    if "stdio" in report:
        lines.append(f"stdio: {report['stdio']}")
    ns = enf.get("namespaces") or {}
    if ns.get("mount"):
        kinds = [name for name in ("user", "mount", "ipc", "pid", "net") if ns.get(name)]
        lines.append(f"namespaces: {', '.join(kinds)}; writable mounts: {', '.join(ns['writable']) or 'none'}"
                     + ("; {tmp}: private tmpfs per run" if ns.get("tmp") else ""))
        lines.append(f"/dev: {', '.join(ns['dev'])}")
    else:
        lines.append(f"namespaces: none ({ns.get('reason') or 'unavailable'})")
    eg = enf.get("egress")
    if eg:
        lines.append(f"egress: {eg['mode']} ({eg['strength']}); proxy {eg['proxy']}; domains: "
                     f"{', '.join(eg['domains'])}" + (f"; denied: {', '.join(eg['domains_deny'])}" if eg['domains_deny']
                                                       else "") + (f"; private: {', '.join(eg['private'])}"
                                                                   if eg['private'] else ""))
    for d in report["degraded"]:
        lines.append(f"DEGRADED: {d}")
    for w in report["warnings"]:
        lines.append(f"warning: {w}")
    return "\n".join(line(text) for text in lines)
