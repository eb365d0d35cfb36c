"""The policy files: what decides what an agent may do next time — Sandboy's policy and generated
step policy, and the agents' own settings. No target's files let an agent write them, whatever the
write roots (the cage since session 7/10; Claude Code's and Codex's files since session 11: an
agent under them rewrote `.sandboy/agent.toml`, the cage's next policy, or `.codex/config.toml`)."""

from sandboy.paths import is_within

POLICY_FILES = ("owen.policy.toml", ".sandboy", ".claude", ".codex")
POLICY_FILE_REASON = "a policy file: never writable, so an agent cannot loosen its next run"


def grants_only_policy_files(pattern) -> bool:
    """A write.allow pattern whose every match lies in the policy files (`/.sandboy`, `/.claude/**`):
    it grants nothing in any target (fidelity: lost)."""
    return pattern.anchored and policy_file_of(_fixed_directories(pattern.body)) is not None


def _fixed_directories(body: str) -> str:
    """The whole components every match of `body` starts with: the text before its first '*',
    without a component that '*' continues (`.claude*` matches `.claude-notes`, no policy file:
    nothing of it is fixed; `.claude/*.json` keeps `.claude`)."""
    head, star, _ = body.partition("*")
    return head[:head.rfind("/") + 1] if star else head


def policy_file_of(path: str):
    """The entry of POLICY_FILES that `path` (repository-relative) is or lies in, or None."""
    path = path.strip("/")
    return next((own for own in POLICY_FILES if is_within(path, own)), None)
