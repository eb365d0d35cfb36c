"""Codex: a permission profile in the project's `.codex/config.toml` — `[permissions.NAME]` with
`filesystem` entries (`"none"` = unreadable, `"read"`, `"write"`) under `":workspace_roots"` and
`[permissions.NAME.network] domains`, selected by `default_permissions` when the user chose none.

The file is shared with the user: read with tomllib, only the profile (and `default_permissions`
when Sandboy set it) replaced, written with tomli-w. TOML comments do not survive that round trip
(tomllib drops them), which docs/capability.md says."""

from sandboy.capability.targets.policy_files import POLICY_FILE_REASON, POLICY_FILES, grants_only_policy_files, policy_file_of
from sandboy.capability.targets.target import ADVISORY, LOST, MARKER, Target, rules
from sandboy.capability.model import POLICY_FILE
from sandboy.errors import PolicyError

CONFIG = ".codex/config.toml"
SANDBOX_NOTE = "Codex's own sandbox applies the profile to the commands it runs; Sandboy does not verify it"


def entries(pattern) -> list:
    """The profile keys for one pattern: the path and everything under it — both keys even for a
    directory-only pattern: Codex reads `x/**` as the path `x` for read/write entries, and when two
    entries name the same path "write" beats "read", so a write.deny `/src/` written `src/**` alone
    lost to a write.allow `/src`'s `src` (session 11). With both keys, a later rule replaces both."""
    base = ("" if pattern.anchored else "**/") + pattern.body
    return [base, base + "/**"]


def profile(policy) -> dict:
    roots = {".": "read" if policy.write_allow else "write"}
    for p in policy.write_allow:
        if grants_only_policy_files(p):
            continue  # lost (fidelity): `.claude/**` = "write" is the path `.claude` for Codex and beat "read"
        if p.is_literal() and not policy.write_rule(p.body, is_dir=True)[0]:
            # a write.deny or read.deny covers it: in Codex the more specific entry wins, so
            # `src/gen` = "write" under write.deny `/src/` ("read") was writable (session 11)
            continue
        for e in entries(p):
            roots[e] = "write"
    for own in POLICY_FILES:  # session 11: "." = "write" let Codex's commands rewrite .sandboy/agent.toml
        roots[own] = "read"     # (a more specific entry wins in Codex, as its own built-in ".codex" = "read")
        if own != POLICY_FILE:
            roots[own + "/**"] = "read"
    for p in policy.write_deny:
        for e in entries(p):
            roots[e] = "read"
    for p in policy.read_deny:
        if p.negated:
            continue  # no exception to a "none" entry can be said
        for e in entries(p):
            roots[e] = "none"
    prof = {"filesystem": {":minimal": "read", ":workspace_roots": roots}}
    if policy.domains:
        prof["network"] = {"domains": list(policy.domains)}
    return prof


# Settings a cloned repository's config.toml may carry (top level, or in a [profiles.*] table) that
# send what Codex reads, or the operator's credentials, elsewhere, or run a program of the file's
# choosing; kept (the file is shared), each named by compile and check (session 11; session 10
# named model_providers, mcp_servers, notify, hooks at the top level only).
_ELSEWHERE = {
    "openai_base_url": "the built-in OpenAI provider sends the conversation (every file Codex reads) and "
                       "the API key to the address it names",
    "chatgpt_base_url": "requests to ChatGPT, with the operator's ChatGPT sign-in, go to the address it names",
    "zsh_path": "Codex runs that program as the shell for every command",
    "js_repl_node_path": "Codex runs that program as its JavaScript runtime",
}
# in a profile also what the top level names above (notify/mcp_servers/hooks: older Codex merges a
# profile's mcp_servers over the top-level ones)
_PROFILE_ELSEWHERE = {**_ELSEWHERE, "mcp_servers": "it runs commands on this machine (MCP servers)"}


def _beyond_64_bits(doc):
    """The dotted key of the first integer outside TOML's 64-bit range (tomllib reads any size;
    the TOML spec says a parser must refuse one: session 10, as NaN in Claude's JSON), or None."""
    pending = [("", doc)]
    while pending:
        key, value = pending.pop()
        if isinstance(value, dict):
            pending.extend((f"{key}.{k}" if key else str(k), v) for k, v in value.items())
        elif isinstance(value, list):
            pending.extend((f"{key}[{i}]", v) for i, v in enumerate(value))
        elif isinstance(value, int) and not isinstance(value, bool) and not -(1 << 63) <= value < (1 << 63):
            return key
    return None


class Codex(Target):
    name, agent, files = "codex", "Codex", (CONFIG,)

    def render(self, policy, ctx) -> dict:
        import tomllib

        import tomli_w

        text = ctx.read(CONFIG)
        doc = {}
        if text:
            try:
                doc = tomllib.loads(text)
            except tomllib.TOMLDecodeError as exc:
                raise PolicyError(CONFIG, "", f"not valid TOML ({exc}); fix it, then compile again") from None
            except RecursionError:  # a cloned repository's `a = [[[[…` was a traceback
                raise PolicyError(CONFIG, "", "nested too deeply to be a Codex configuration; fix it, then compile again") from None
            beyond = _beyond_64_bits(doc)
            if beyond is not None:
                raise PolicyError(CONFIG, beyond, "an integer beyond 64 bits, which TOML does not allow: tomllib reads "
                                  "it, but written back Codex's parser could not read the file at all (every rule "
                                  "in it ignored); fix it, then compile again")
        previous = ctx.owned(CONFIG)
        perms = doc.setdefault("permissions", {})
        if not isinstance(perms, dict):
            raise PolicyError(CONFIG, "permissions", "expected a table")
        old_profile = previous.get("profile")
        if old_profile and old_profile != policy.codex_profile:
            perms.pop(old_profile, None)  # the policy renamed its profile: the old one is ours
        perms[policy.codex_profile] = profile(policy)
        owned = {"profile": policy.codex_profile}
        if "sandbox_mode" in doc or "sandbox_workspace_write" in doc:
            ctx.warnings.append(f"{CONFIG}: sandbox_mode / [sandbox_workspace_write] is set, so Codex uses "
                                "those older settings and IGNORES the permission profile; remove them")
        # kept from the file (a cloned repository ships it), named so that neither compile nor
        # check reads as "matches owen.policy.toml" while they widen or run commands (session 7)
        if doc.get("approval_policy") == "never":
            ctx.warnings.append(f"{CONFIG}: approval_policy = \"never\" is kept from the file: Codex runs what it "
                                "decides without asking")
        profiles = doc.get("profiles")  # `profile = "p"` + [profiles.p]: the same keys, one level down
        for name, table in (profiles.items() if isinstance(profiles, dict) else ()):
            if isinstance(table, dict) and (table.get("approval_policy") == "never" or "sandbox_mode" in table):
                ctx.warnings.append(f"{CONFIG}: [profiles.{name}] sets approval_policy = \"never\" or sandbox_mode, "
                                    "kept from the file: selected, Codex runs without asking or IGNORES the "
                                    "permission profile; remove them")
            for key, what in (_PROFILE_ELSEWHERE.items() if isinstance(table, dict) else ()):
                if table.get(key):
                    ctx.warnings.append(f"{CONFIG}: [profiles.{name}] {key} is kept from the file, not from "
                                        f"owen.policy.toml: selected, {what}; read it before running Codex here")
        env_policy = doc.get("shell_environment_policy")
        if isinstance(env_policy, dict) and (env_policy.get("ignore_default_excludes") is True or env_policy.get("set")):
            # as Claude's `env` (session 7): the variables of every command Codex runs — the operator's
            # *KEY*/*SECRET*/*TOKEN* ones kept in, or PATH / LD_PRELOAD / NODE_OPTIONS set by the file
            ctx.warnings.append(f"{CONFIG}: shell_environment_policy (ignore_default_excludes or set) is kept from "
                                "the file, not from owen.policy.toml: it passes the operator's KEY/SECRET/TOKEN "
                                "variables to, or sets the environment of, every command Codex runs; read it first")
        for key, what in _ELSEWHERE.items():  # session 11: as model_providers, one key each
            if doc.get(key):
                ctx.warnings.append(f"{CONFIG}: {key} is kept from the file, not from owen.policy.toml: {what}; "
                                    "read it before running Codex here")
        for key in ("notify", "mcp_servers", "hooks"):
            if doc.get(key):
                ctx.warnings.append(f"{CONFIG}: {key} is kept from the file, not from owen.policy.toml: it runs "
                                    "commands on this machine; read it before running Codex here")
        if doc.get("model_providers"):  # session 10: a provider's base_url receives every prompt and file read
            ctx.warnings.append(f"{CONFIG}: model_providers is kept from the file, not from owen.policy.toml: a "
                                "provider it defines receives the conversation (every file Codex reads) at the "
                                "address it names; read it before running Codex here")
        chosen = doc.get("default_permissions")
        if chosen is None or (previous.get("default_permissions") and chosen == old_profile):
            doc["default_permissions"] = policy.codex_profile
            owned["default_permissions"] = True
        elif chosen != policy.codex_profile:
            ctx.warnings.append(f"{CONFIG}: default_permissions = {chosen!r} (the user's choice) is kept: "
                                f"the [permissions.{policy.codex_profile}] profile is written but not selected")
        ctx.own(CONFIG, owned)
        head = f"# {MARKER} (the [permissions.{policy.codex_profile}] profile)\n"
        try:
            return {CONFIG: head + tomli_w.dumps(doc)}
        except RecursionError:  # tomllib read it, tomli_w's writer recurses deeper per level (300)
            raise PolicyError(CONFIG, "", "nested too deeply to be a Codex configuration; fix it, then compile again") from None

    def retract(self, ctx) -> dict:
        """The policy no longer names Codex: remove the profile Sandboy wrote (and
        `default_permissions` when Sandboy set it), keep the rest."""
        import tomllib

        import tomli_w

        try:
            doc = tomllib.loads(ctx.read(CONFIG) or "")
        except (tomllib.TOMLDecodeError, RecursionError):
            return {}
        if _beyond_64_bits(doc) is not None:
            return {}  # not a file Codex reads; not ours to repair (compile for codex says why)
        owned = ctx.owned(CONFIG)
        perms = doc.get("permissions")
        if isinstance(perms, dict):
            perms.pop(owned.get("profile"), None)
            if not perms:
                doc.pop("permissions")
        if owned.get("default_permissions") and doc.get("default_permissions") == owned.get("profile"):
            doc.pop("default_permissions")
        try:
            return {CONFIG: tomli_w.dumps(doc)}
        except RecursionError:
            return {}  # not ours to repair

    def fidelity(self, policy) -> list:
        out = []
        for key, text, item in rules(policy):
            if key == "read.deny" and item.negated:
                out.append((key, text, LOST, "a profile has no exception to a \"none\" entry: the path "
                            "stays unreadable (stricter than asked)"))
            elif key == "read.deny":
                out.append((key, text, ADVISORY, '"none" entries in the profile; ' + SANDBOX_NOTE))
            elif key == "index.exclude":
                out.append((key, text, LOST, "Codex has no index or ignore setting"))
            elif key == "write.allow" and grants_only_policy_files(item):
                out.append((key, text, LOST, 'inside the policy files, which the profile keeps "read" (an agent '
                            "cannot loosen its next run; stricter than asked)"))
            elif key == "write.allow" and item.is_literal() and not policy.write_rule(item.body, is_dir=True)[0]:
                out.append((key, text, LOST, "a write.deny or read.deny covers it; not written, since the more "
                            "specific entry wins in Codex (the path stays as the deny says, as the policy decides)"))
            elif key in ("write.allow", "write.deny"):
                out.append((key, text, ADVISORY, '"write"/"read" entries in the profile; ' + SANDBOX_NOTE))
            elif key.startswith("exec."):
                out.append((key, text, LOST, "a permission profile has no command rules (Codex's exec "
                            "policy rules live elsewhere and are not generated)"))
            else:
                out.append((key, text, ADVISORY, "[permissions.NAME.network] domains; " + SANDBOX_NOTE))
        return out

    def decide(self, policy, path: str) -> dict:
        read_hit = policy.denied_without_exceptions(path)
        writable, why = policy.write_rule(path)
        own = policy_file_of(path)
        if read_hit:
            writable, why = False, read_hit
        elif own:
            writable, why = False, f'{own} = "read": {POLICY_FILE_REASON}'
        why = why.text if hasattr(why, "text") else why
        return {
            "readable": (False, f"{entries(read_hit)[0]} = \"none\"") if read_hit else (True, ":workspace_roots readable"),
            "indexable": (None, "Codex has no index"),
            "writable": (writable, why),
        }
