"""What every target is (pip-audit's pluggable output formats are the model): a `Target` names its
files, renders them from the policy (merging into what is there where the format is shared with
the user), says per rule what it enforces, advises or loses, and decides one path the way its
agent would.

    render(policy, read_existing) -> {relative path: text or None (do not write)}
    fidelity(policy) -> [(rule, status, reason)]        status in ENFORCED / ADVISORY / LOST
    decide(policy, path) -> {"readable": (bool|None, why), "indexable": ..., "writable": ...}
"""

ENFORCED, ADVISORY, LOST = "enforced", "advisory", "lost"
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
