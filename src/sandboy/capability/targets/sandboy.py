"""The Sandboy step policy `.sandboy/agent.toml`: the one target that ENFORCES — run an agent (or
its shell) with `sandboy run --policy .sandboy/agent.toml -- ...` from the repository root.

It stands alone: presets grant the system directories a shell needs (read/exec only), the
repository is readable, the write roots are write.allow (or the repository), read.deny becomes
`fs.deny` (patterns the cage matches at launch, so the committed file depends on nothing local),
literal write.deny paths become `fs.protect`, domains become `net.domains` (Layer 3's proxy).
The policy files themselves are protected, so a caged agent cannot loosen its next run."""

from sandboy.capability.targets.policy_files import POLICY_FILE_REASON, POLICY_FILES, policy_file_of
from sandboy.capability.targets.target import ENFORCED, LOST, MARKER, Target, rules
from sandboy.paths import is_within

AGENT = ".sandboy/agent.toml"
SELF_PROTECTED = POLICY_FILES


def deny_entry(pattern) -> str:
    # `**/x` is zero or more directories deep in the cage's matcher, so it covers the root too.
    return pattern.body if pattern.anchored else "**/" + pattern.body


def write_roots(policy) -> tuple:
    """(granted write roots, patterns that grant nothing: not literal, or inside the policy files —
    write.allow ["/.sandboy"] let the caged agent rewrite agent.toml, its next run's policy, and
    the cage does not protect a file that is itself a write root: rvsec7)."""
    if not policy.write_allow:
        return ["."], []
    ok = [p.body for p in policy.write_allow if _grantable(p)]
    return ok, [p for p in policy.write_allow if not _grantable(p)]


def _grantable(pattern) -> bool:
    return pattern.is_literal() and not any(is_within(pattern.body, own) for own in SELF_PROTECTED)


def in_repo(path: str) -> str:
    """A repository path as the cage reads "inside the repository": `{repo}/x` is refused at
    launch when a symlink in the checkout leads it out (`src -> ~/work` made the write root `src`
    the operator's ~/work: session 7), where a plain `x` would follow the link."""
    return "{repo}" if path == "." else "{repo}/" + path


def _toml_list(values) -> str:
    import json

    # A JSON string is a TOML basic string, but not with ensure_ascii: JSON spells a character
    # beyond the BMP as a surrogate pair (`\ud83d\ude00`), which TOML refuses (not a scalar value),
    # so a file named with an emoji made agent.toml unreadable. Controls are still escaped.
    return "[" + ", ".join(json.dumps(v, ensure_ascii=False) for v in values) + "]"


class SandboyStep(Target):
    name, agent, files = "sandboy", "Sandboy (sandboy run / gate steps)", (AGENT,)

    def render(self, policy, ctx) -> dict:
        roots, _ = write_roots(policy)
        protect = [p.body for p in policy.write_deny if p.is_literal()]
        # Always, not only under a "." root: a write root is resolved at launch, so a checkout
        # shipping `src -> .` (or `src -> .sandboy`) with write.allow ["/src"] made the whole
        # repository, policy files included, writable — the caged agent rewrote agent.toml, its
        # next run's policy, while `explain` said "outside every write root" (session 10).
        protect += [p for p in SELF_PROTECTED if p not in protect]
        lines = [
            f"# {MARKER}",
            "# Run from the repository root:  sandboy run --policy .sandboy/agent.toml -- COMMAND",
            "version = 1",
            f"include = {_toml_list(policy.include)}",
            "",
            "[fs]",
            'read = ["{repo}"]',
            f"write = {_toml_list([*map(in_repo, roots), '{tmp}'])}",
            f"deny = {_toml_list(deny_entry(p) for p in policy.read_deny if not p.negated)}      # read.deny: neither readable nor writable",
            f"protect = {_toml_list(map(in_repo, protect))}      # write.deny and the policy files: readable, never writable",
            "",
        ]
        if policy.domains:
            lines += ["[net]", f"domains = {_toml_list(policy.domains)}", ""]
        lines += ["[env]", 'pass = ["PATH", "LANG", "LC_ALL", "TERM", "TZ"]', 'set = { HOME = "{tmp}" }', ""]
        return {AGENT: "\n".join(lines)}

    def fidelity(self, policy) -> list:
        # a set (patterns compare by identity): `item in` a list of 30,000 was quadratic (redinput12)
        not_roots = set(write_roots(policy)[1])
        out = []
        for key, text, item in rules(policy):
            if key == "read.deny" and item.negated:
                out.append((key, text, LOST, "fs.deny cannot make an exception: the path stays "
                            "unreadable in the cage (stricter than asked)"))
            elif key == "read.deny":
                out.append((key, text, ENFORCED, f"fs.deny {deny_entry(item)!r} (Landlock: neither read nor "
                            "written, by a shell too); matched when the command starts, so a "
                            "file created later is not denied; Landlock's deny inside a grant splits the "
                            "directory holding each match: nothing new can be created in it"))
            elif key == "index.exclude":
                out.append((key, text, LOST, "not a security rule: the cage has no index, the path stays readable"))
            elif key == "write.allow":
                if item in not_roots and item.is_literal():
                    out.append((key, text, LOST, "inside the policy files (" + ", ".join(SELF_PROTECTED) + "): "
                                "never a write root, so a caged agent cannot loosen its next run (stricter than asked)"))
                elif item in not_roots:
                    out.append((key, text, LOST, "a write root is a literal path; this pattern grants nothing "
                                "(stricter than asked)"))
                else:
                    out.append((key, text, ENFORCED, "a write root (Landlock); everything else is read-only"))
            elif key == "write.deny":
                if item.is_literal():
                    out.append((key, text, ENFORCED, "fs.protect: bound read-only under the namespace tier "
                                "(Landlock read-only split otherwise); only if the path exists at launch"))
                else:
                    out.append((key, text, LOST, "fs.protect takes literal paths anchored at the root; "
                                "this pattern stays writable in the cage"))
            elif key == "exec.allow":
                out.append((key, text, LOST, "Landlock decides execution by file, not by arguments; the "
                            "presets' programs stay executable (a shell needs them)"))
            elif key == "exec.deny":
                out.append((key, text, LOST, "Landlock decides execution by file, not by arguments; the "
                            "program stays executable through the system preset"))
            else:
                out.append((key, text, ENFORCED, "net.domains: the only way out is Sandboy's egress proxy, "
                            "from the cage's own network namespace (where the tier is unavailable: a "
                            "degraded loopback fallback, refused under compat.landlock = strict)"))
        return out

    def decide(self, policy, path: str) -> dict:
        read_hit = policy.denied_without_exceptions(path)
        if read_hit:
            denied = (False, f"fs.deny {deny_entry(read_hit)!r}")
            return {"readable": denied, "indexable": (None, "no index"), "writable": denied}
        roots, _ = write_roots(policy)
        protect = next((p for p in policy.write_deny if p.is_literal() and p.covers(path)), None)
        own = policy_file_of(path)
        if own:  # explain said "inside a write root" for .sandboy/agent.toml, which fs.protect keeps
            writable = (False, f"fs.protect {own!r}: {POLICY_FILE_REASON}")
        elif protect:
            writable = (False, f"fs.protect {protect.body!r}")
        elif any(r == "." or is_within(path, r) for r in roots):
            writable = (True, "inside a write root")
        else:
            writable = (False, "outside every write root")
        return {"readable": (True, 'fs.read "{repo}"'), "indexable": (None, "no index"), "writable": writable}
