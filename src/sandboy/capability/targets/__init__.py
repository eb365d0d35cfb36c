"""One emitter per agent format, behind one small interface (pip-audit's pluggable output formats
are the model): a `Target` names its files, renders them from the policy (merging into what is
there where the format is shared with the user), says per rule what it enforces, advises or loses,
and decides one path the way its agent would.

    render(policy, read_existing) -> {relative path: text or None (do not write)}
    fidelity(policy) -> [(rule, status, reason)]        status in ENFORCED / ADVISORY / LOST
    decide(policy, path) -> {"readable": (bool|None, why), "indexable": ..., "writable": ...}
"""

from sandboy.paths import is_within

ENFORCED, ADVISORY, LOST = "enforced", "advisory", "lost"
# The files that decide what an agent may do next time: Sandboy's policy and generated step
# policy, and the agents' own settings. No target's files let an agent write them, whatever the
# write roots (the cage since session 7/10; Claude Code's and Codex's files since session 11: an
# agent under them rewrote `.sandboy/agent.toml`, the cage's next policy, or `.codex/config.toml`).
POLICY_FILES = ("owen.policy.toml", ".sandboy", ".claude", ".codex")
POLICY_FILE_REASON = "a policy file: never writable, so an agent cannot loosen its next run"


def grants_only_policy_files(pattern) -> bool:
    """A write.allow pattern whose every match lies in the policy files (`/.sandboy`, `/.claude/**`):
    it grants nothing in any target (fidelity: lost)."""
    return pattern.anchored and policy_file_of(pattern.body.split("*")[0].rstrip("/")) is not None


def policy_file_of(path: str):
    """The entry of POLICY_FILES that `path` (repository-relative) is or lies in, or None."""
    path = path.strip("/")
    return next((own for own in POLICY_FILES if is_within(path, own)), None)


MARKER = "generated from owen.policy.toml by `sandboy policy compile`: edit that file, not this one"


class Target:
    name = ""
    agent = ""           # who reads it
    default = True       # emitted when the policy names no targets
    files = ()

    def render(self, policy, read_existing) -> dict:
        raise NotImplementedError

    def fidelity(self, policy) -> list:
        raise NotImplementedError

    def decide(self, policy, path: str) -> dict:
        raise NotImplementedError


def rules(policy):
    """Every rule of the policy as (section key, text, object), in file order."""
    for key, items in (("read.deny", policy.read_deny), ("index.exclude", policy.index_exclude),
                       ("write.allow", policy.write_allow), ("write.deny", policy.write_deny),
                       ("exec.allow", policy.exec_allow), ("exec.deny", policy.exec_deny)):
        for item in items:
            yield key, item.text, item
    for domain in policy.domains:
        yield "network.domains", domain, domain


# Imported last: each target module imports the names above from this package.
from sandboy.capability.targets import claude, codex, ignore, sandboy  # noqa: E402

TARGETS = {target.name: target for target in (*ignore.TARGETS, claude.Claude(), codex.Codex(), sandboy.SandboyStep())}
