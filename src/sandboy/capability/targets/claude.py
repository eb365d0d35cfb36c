"""Claude Code: `.claude/settings.json` — permission rules and sandbox settings, merged into the
file the user already has. Only the entries Sandboy owns change: the rules it wrote last time are
recorded in `.sandboy/owned.json`, so a rule dropped from the policy is removed again, and
everything else in the file (the user's own rules, hooks, env, model...) is kept as it was."""

import json
import re

from sandboy.capability.targets.policy_files import POLICY_FILE_REASON, POLICY_FILES, grants_only_policy_files, policy_file_of
from sandboy.capability.targets.target import ADVISORY, LOST, Target, rules
from sandboy.capability.model import POLICY_FILE
from sandboy.errors import PolicyError

SETTINGS = ".claude/settings.json"
SANDBOX_NOTE = ("Claude Code's own sandbox applies it to Bash when enabled and available there; "
                "Sandboy does not verify it")


class NotWritableBack(ValueError):
    """A value Python's json reads but cannot write back as JSON that Claude Code reads."""


def _not_json(constant: str):
    raise NotWritableBack(f"{constant} is not JSON (JavaScript's JSON.parse refuses it)")


def _finite(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise NotWritableBack(f"the number {text[:40]} is beyond a double: written back it would be Infinity, "
                              "which is not JSON")
    return value


def load_settings(text: str):
    """`text` parsed as the JSON Claude Code (JavaScript's JSON.parse) reads. Python's json also
    takes NaN, Infinity and 1e999 (read as inf) and wrote them back as NaN/Infinity, which
    JSON.parse refuses: a repository's settings.json holding one became a file Claude Code cannot
    read at all — every rule Sandboy merged into it inert — while `check` said "match" (session
    10). ValueError (and RecursionError) as json.loads raises them."""
    return json.loads(text, parse_constant=_not_json, parse_float=_finite)


_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


def dump_settings(doc) -> str:
    """`doc` as the text written: a lone surrogate escape (`"\\ud800"`, valid JSON, read by
    Claude Code as one UTF-16 unit) is written back as that escape — ensure_ascii=False left
    the character raw, which UTF-8 cannot encode (a traceback, nothing written)."""
    text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def paths(pattern) -> list:
    """Claude rule paths for one pattern: `./x` anchored at the project, `**/x` at any depth;
    a matched directory covers its contents, so `x/**` is emitted too."""
    base = ("./" if pattern.anchored else "**/") + pattern.body
    return [base + "/**"] if pattern.dir_only else [base, base + "/**"]


def claude_rule(tool: str, path: str) -> str:
    """`Tool(path)` as Claude Code stores a rule: a parenthesis in the content escaped with a
    backslash (its rule parser reads the content up to the closing unescaped parenthesis and then
    unescapes them), so a file named `secret(1).txt` stays that name whichever parenthesis the
    parser takes as the closing one (session 10). Patterns hold no backslash to escape."""
    return f"{tool}({path.translate(_RULE_ESCAPES)})"


_RULE_ESCAPES = str.maketrans({"(": "\\(", ")": "\\)"})


def _policy_file_paths() -> list:
    """Claude rule paths for the policy files (POLICY_FILES): each, and everything under it."""
    return [path for own in POLICY_FILES for path in _own_paths(own)]


def _own_paths(own: str) -> tuple:
    # owen.policy.toml is a file; the others are directories (each, and everything in it)
    return ("./" + own,) if own == POLICY_FILE else ("./" + own, "./" + own + "/**")


def wanted(policy) -> dict:
    """The entries this policy puts in the file: {dotted list key: [values]}."""
    allow, deny = [], []
    deny_read, allow_write, deny_write = [], [], []
    for p in policy.read_deny:
        if p.negated:
            continue  # deny rules win over allow rules: Claude Code cannot make the exception
        for path in paths(p):
            deny += [claude_rule("Read", path), claude_rule("Edit", path)]  # a Read() deny alone leaves Edit/Write open
            deny_read.append(path)
            deny_write.append(path)
    for p in policy.write_deny:
        for path in paths(p):
            deny.append(claude_rule("Edit", path))
            deny_write.append(path)
    for path in _policy_file_paths():
        # session 11: with no write.allow, allowWrite ["."] let a sandboxed command (run without
        # asking) rewrite .sandboy/agent.toml — the cage's next policy — or .codex/config.toml
        deny.append(claude_rule("Edit", path))
        deny_write.append(path)
    for p in policy.write_allow:
        if grants_only_policy_files(p):
            continue  # lost (fidelity): the policy files' deny rules win over it
        for path in paths(p):
            allow.append(claude_rule("Edit", path))
            allow_write.append(path)
    for rule in policy.exec_allow:
        allow.append(f"Bash({rule.text}:*)")
    for rule in policy.exec_deny:
        deny.append(f"Bash({rule.text}:*)")
    for domain in policy.domains:
        allow.append(f"WebFetch(domain:{domain})")
    out = {
        "permissions.allow": allow, "permissions.deny": deny,
        "sandbox.filesystem.denyRead": deny_read, "sandbox.filesystem.denyWrite": deny_write,
        "sandbox.filesystem.allowWrite": allow_write if policy.write_allow else ["."],
        "sandbox.network.allowedDomains": list(policy.domains),
    }
    return {k: list(dict.fromkeys(v)) for k, v in out.items()}


def _node(doc: dict, dotted: str, create: bool):
    *parents, leaf = dotted.split(".")
    node = doc
    for part in parents:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            if not create:
                return None, leaf
            nxt = node[part] = {}
        node = nxt
    return node, leaf


def merge(doc: dict, want: dict, previously_owned: dict) -> dict:
    """Put `want` into `doc`: values owned last time and no longer wanted are removed, values
    the user wrote are kept in place, new values appended. Returns what is owned now."""
    owned = {}
    lists = [k for k, v in previously_owned.items() if isinstance(v, list)]
    for key in sorted(set(want) | set(lists)):
        values = want.get(key, [])
        stale = {_hashable(v) for v in previously_owned.get(key, ())} - {_hashable(v) for v in values}
        node, leaf = _node(doc, key, create=bool(values))
        if node is None:
            continue
        current = node.get(leaf, [])
        if not isinstance(current, list):
            raise PolicyError(SETTINGS, key, f"expected a list, found {type(current).__name__}: fix or remove it")
        kept = [v for v in current if _hashable(v) not in stale]
        # membership through sets (`_hashable`): lists made these quadratic, and the repository
        # writes owen.policy.toml — 30,000 read.deny and 30,000 write.allow patterns held
        # `policy compile` for more than 5 minutes (redinput12)
        kept_keys = {_hashable(v) for v in kept}
        added = [v for v in values if _hashable(v) not in kept_keys]
        added_keys = {_hashable(v) for v in added}
        before = {_hashable(v) for v in previously_owned.get(key, ())}
        owned[key] = [v for v in values if _hashable(v) in added_keys or _hashable(v) in before]
        if kept or added:
            node[leaf] = kept + added
        elif leaf in node:
            del node[leaf]
    if "enabled" not in doc.get("sandbox", {}):
        doc.setdefault("sandbox", {})["enabled"] = True
        owned["sandbox.enabled"] = True
    elif previously_owned.get("sandbox.enabled"):
        owned["sandbox.enabled"] = True
    return {k: v for k, v in owned.items() if v}


def _hashable(value):
    """`value` as a set member: itself when hashable (strings, the rules Sandboy writes), else its
    canonical JSON text (a list or object a settings file may hold where rules go)."""
    try:
        hash(value)
    except TypeError:
        return json.dumps(value, sort_keys=True)
    return value


def _empty(node) -> bool:
    return isinstance(node, dict) and all(_empty(v) for v in node.values())


# Entries Sandboy keeps from the file it merges into (a cloned repository ships it): lists whose
# extra values grant more than owen.policy.toml says, settings that widen every tool call, and
# settings that run commands on the host. Kept (the file is shared), but each one is named in a
# warning by compile AND check: `check` said "generated files match owen.policy.toml" for a
# repository whose own settings.json added `Bash(*)`, bypassPermissions and a hook (session 7).
# Session 10 added what the sandbox settings and the MCP/plugin settings can widen: allowRead
# re-allows reading inside denyRead (where Sandboy puts read.deny), allowUnixSockets /
# allowAllUnixSockets open sockets (a Docker socket is the host), the proxy ports hand the
# domain decision to whatever listens there, enableWeakerNestedSandbox weakens the sandbox,
# enabledMcpjsonServers approves the repository's .mcp.json servers (commands) one by one as
# enableAllProjectMcpServers does all of them, and plugins bring hooks and MCP servers.
_WIDENING_LISTS = ("permissions.allow", "permissions.additionalDirectories", "sandbox.filesystem.allowWrite",
                   "sandbox.filesystem.allowRead", "sandbox.network.allowedDomains",
                   "sandbox.network.allowUnixSockets", "sandbox.excludedCommands", "enabledMcpjsonServers")
_WIDENING_MODES = ("acceptEdits", "bypassPermissions", "dontAsk")
_WIDENING_SWITCHES = {  # dotted key set to true: what it opens
    "sandbox.allowUnsandboxedCommands": "a command that fails in the sandbox may run outside it",
    "sandbox.enableWeakerNestedSandbox": "the sandbox runs weakened",
    "sandbox.network.allowAllUnixSockets": "sandboxed commands may connect to any Unix socket",
    "sandbox.network.allowLocalBinding": "sandboxed commands may listen on local ports",
    "enableAllProjectMcpServers": "the repository's MCP servers start without asking",
}
_WIDENING_SETTINGS = {  # dotted key present at all: what it does
    "sandbox.network.httpProxyPort": "sandboxed commands' traffic goes to whatever listens on that port, "
                                     "which then decides instead of allowedDomains",
    "sandbox.network.socksProxyPort": "sandboxed commands' traffic goes to whatever listens on that port, "
                                      "which then decides instead of allowedDomains",
}
_RUNS_COMMANDS = ("hooks", "apiKeyHelper", "statusLine", "awsAuthRefresh", "awsCredentialExport", "otelHeadersHelper",
                  "enabledPlugins", "extraKnownMarketplaces")
# Claude Code reads this one after settings.json and lets it override (a repository can commit it)
LOCAL_SETTINGS = ".claude/settings.local.json"


def widening(doc: dict, want: dict, name: str = SETTINGS) -> list:
    """What `doc` (the settings file `name`) holds beyond `want` that grants more than the policy."""
    out = []
    for key in _WIDENING_LISTS:
        node, leaf = _node(doc, key, create=False)
        values = node.get(leaf) if node is not None else None
        wanted = {_hashable(v) for v in want.get(key, ())}
        for value in values if isinstance(values, list) else ():
            if _hashable(value) not in wanted:
                out.append(f"{name}: {key} {json.dumps(value, ensure_ascii=False)} is kept from the file, not "
                           "from owen.policy.toml: it grants more than the policy says")
    perms = doc.get("permissions")
    mode = perms.get("defaultMode") if isinstance(perms, dict) else None
    if mode in _WIDENING_MODES:
        out.append(f"{name}: permissions.defaultMode = {json.dumps(mode)} is kept from the file: tool calls "
                   "the policy does not allow run without asking")
    for key, what in _WIDENING_SWITCHES.items():
        node, leaf = _node(doc, key, create=False)
        if node is not None and node.get(leaf) is True:
            out.append(f"{name}: {key} = true is kept from the file: {what}")
    for key, what in _WIDENING_SETTINGS.items():
        node, leaf = _node(doc, key, create=False)
        if node is not None and node.get(leaf) is not None:
            out.append(f"{name}: {key} = {json.dumps(node.get(leaf), ensure_ascii=False)} is kept from the file: {what}")
    for key in _RUNS_COMMANDS:
        if doc.get(key):
            out.append(f"{name}: {key} is kept from the file, not from owen.policy.toml: it runs commands on "
                       "this machine, outside any sandbox; read it before running Claude Code here")
    if doc.get("env"):  # NODE_OPTIONS=--require ./x.js runs code in every command; ANTHROPIC_BASE_URL
        out.append(f"{name}: env is kept from the file, not from owen.policy.toml: it sets the environment "
                   "of Claude Code and every command it runs (NODE_OPTIONS, ANTHROPIC_BASE_URL...); read it first")
    return out


def local_widening(ctx, want: dict) -> list:
    """`.claude/settings.local.json` in the repository: Claude Code applies it over settings.json,
    so what it holds can undo what Sandboy wrote there (rvsec7: a committed one with
    bypassPermissions left `policy check` saying "match")."""
    text = ctx.read(LOCAL_SETTINGS)
    if text is None or not text.strip():
        return []
    try:
        doc = load_settings(text)
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict):
        return [f"{LOCAL_SETTINGS}: not a JSON object Sandboy can read, and Claude Code applies that file over "
                f"{SETTINGS}; remove it or fix it"]
    return [*widening(doc, want, LOCAL_SETTINGS),
            f"{LOCAL_SETTINGS} exists: Claude Code applies it over {SETTINGS} (which Sandboy writes), so "
            "owen.policy.toml holds only where that file agrees; a cloned repository should not ship it"]


class Claude(Target):
    name, agent, files = "claude", "Claude Code", (SETTINGS,)

    def render(self, policy, ctx) -> dict:
        text = ctx.read(SETTINGS)
        doc = {}
        if text is not None and text.strip():
            try:
                doc = load_settings(text)
            except NotWritableBack as exc:
                raise PolicyError(SETTINGS, "", f"{exc}: merged and written back, Claude Code could not read the "
                                  "file at all (every rule in it ignored); fix it, then compile again") from None
            except ValueError as exc:
                raise PolicyError(SETTINGS, "", f"not valid JSON ({exc}); fix it, then compile again") from None
            except RecursionError:  # a cloned repository's `[[[[…` (200,000 deep) was a traceback
                raise PolicyError(SETTINGS, "", "nested too deeply to be a settings file; fix it, then compile again") from None
            if not isinstance(doc, dict):
                raise PolicyError(SETTINGS, "", "expected a JSON object at the top")
        want = wanted(policy)
        ctx.own(SETTINGS, merge(doc, want, ctx.owned(SETTINGS)))
        ctx.warnings.extend(widening(doc, want))
        ctx.warnings.extend(local_widening(ctx, want))
        if doc.get("sandbox", {}).get("enabled") is not True:
            ctx.warnings.append(f"{SETTINGS}: sandbox.enabled is set to false by the user: the sandbox "
                                "settings written there have no effect (the permission rules still apply)")
        return {SETTINGS: dump_settings(doc)}

    def retract(self, ctx) -> dict:
        """The policy no longer names Claude: take out every entry Sandboy owns, keep the rest."""
        text = ctx.read(SETTINGS)
        try:
            doc = load_settings(text) if text else {}
        except (ValueError, RecursionError):
            return {}  # not ours to repair; compile for claude reports it
        if not isinstance(doc, dict):
            return {}
        owned = ctx.owned(SETTINGS)
        merge(doc, {}, {k: v for k, v in owned.items() if isinstance(v, list)})
        if owned.get("sandbox.enabled") and isinstance(doc.get("sandbox"), dict):
            doc["sandbox"].pop("enabled", None)
        for key in ("sandbox", "permissions"):
            if doc.get(key) == {} or (key == "sandbox" and _empty(doc.get(key))):
                doc.pop(key, None)
        return {SETTINGS: dump_settings(doc)}

    def fidelity(self, policy) -> list:
        out = []
        for key, text, item in rules(policy):
            if key == "read.deny" and item.negated:
                out.append((key, text, LOST, "a deny rule wins over any allow rule in Claude Code: "
                            "the path stays denied (stricter than asked)"))
            elif key == "read.deny":
                out.append((key, text, ADVISORY, "Read() and Edit() deny rules (both: a Read() deny alone "
                            "leaves Edit/Write open) and sandbox.filesystem.denyRead; " + SANDBOX_NOTE))
            elif key == "index.exclude":
                out.append((key, text, LOST, "Claude Code has no index setting; a Read() deny would hide "
                            "the file entirely (that is read.deny)"))
            elif key == "write.deny":
                out.append((key, text, ADVISORY, "Edit() deny and sandbox.filesystem.denyWrite; " + SANDBOX_NOTE))
            elif key == "write.allow" and grants_only_policy_files(item):
                out.append((key, text, LOST, "inside the policy files: the Edit() deny rules Sandboy writes for "
                            "them win over this allow (a deny wins in Claude Code), so an agent cannot loosen its next "
                            "run (stricter than asked)"))
            elif key == "write.allow":
                out.append((key, text, ADVISORY, "Edit() allow and sandbox.filesystem.allowWrite; " + SANDBOX_NOTE))
            elif key.startswith("exec."):
                out.append((key, text, ADVISORY, f"Bash({text}:*) rule: matched on the command text by "
                            "Claude Code; nothing stops the same program run another way (a script, env, an "
                            "interpreter)"))
            else:
                out.append((key, text, ADVISORY, "WebFetch(domain:) allow and sandbox.network.allowedDomains; "
                            + _domain_ports(text) + SANDBOX_NOTE))
        return out

    def decide(self, policy, path: str) -> dict:
        read_hit = policy.denied_without_exceptions(path)
        write_hit = read_hit or next((p for p in policy.write_deny if p.covers(path)), None)
        own = policy_file_of(path)
        if write_hit is None and own:
            writable = (False, f"{claude_rule('Edit', _own_paths(own)[-1])} deny: {POLICY_FILE_REASON}")
        elif write_hit is None and policy.write_allow and not any(p.covers(path) for p in policy.write_allow):
            writable = (None, "no Edit() rule: Claude Code asks")
        else:
            writable = ((False, f"{claude_rule('Edit', paths(write_hit)[0])} deny") if write_hit
                        else (True, "no Edit() deny rule"))
        return {
            "readable": (False, f"{claude_rule('Read', paths(read_hit)[0])} deny") if read_hit else (True, "no Read() deny rule"),
            "indexable": (None, "Claude Code has no index"),
            "writable": writable,
        }


def _domain_ports(text: str) -> str:
    """What Claude Code's sandbox makes of a domain entry's ports, for the fidelity table (session 13
    red team: the agent's file was broader than the policy without a word). Its runtime's domain
    patterns carry no port — anthropic-experimental/sandbox-runtime's schema refuses ':' and its
    filter compares the host alone (source read, December 2025) — so a bare entry, ports 80 and 443
    to the cage, allows every port of that host there; a `host:port` entry is no pattern of that
    runtime (newer Claude Code documents an optional port; not verified here)."""
    from sandboy.egress.rules import WEB_PORTS, parse_entry

    if parse_entry(text).ports == WEB_PORTS:
        return "there it allows every port of the host (the cage: 80 and 443); "
    return ("a host:port entry: Claude Code sandbox runtimes without port patterns refuse it, "
            "newer ones limit it to that port; ")

