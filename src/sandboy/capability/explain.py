"""`sandboy policy explain PATH`: per target, whether PATH is readable, indexable and writable,
and which rule decided. Canonical first: that is what every target is measured against."""

from sandboy.capability.targets import TARGETS
from sandboy.capability.targets.policy_files import POLICY_FILE_REASON, policy_file_of


def canonical(policy, path: str) -> dict:
    decision = policy.read_decision(path)
    read_hit = policy.read_rule(path)
    index_hit = policy.index_rule(path)
    writable, why = policy.write_rule(path)
    own = policy_file_of(path)
    if writable and own:  # every target keeps them (docs/capability.md), whatever write.allow says
        writable, why = False, f"{own!r} is {POLICY_FILE_REASON}"
    label = lambda key, p: f"{key} {p.text!r}"  # noqa: E731
    return {
        "readable": (False, label("read.deny", read_hit)) if read_hit
        else (True, label("read.deny", decision)) if decision else (True, "no read.deny pattern"),
        "indexable": (False, label("read.deny" if index_hit is read_hit else "index.exclude", index_hit))
        if index_hit else (True, "no read.deny or index.exclude pattern"),
        "writable": (writable, label("write.deny" if why in policy.write_deny else "read.deny" if why in policy.read_deny
                                     else "write.allow", why) if hasattr(why, "text") else why),
    }


def explain(policy, path: str) -> dict:
    out = {"policy": canonical(policy, path)}
    for name in policy.targets:
        out[name] = TARGETS[name].decide(policy, path)
    return out


def normalize(path: str, root: str) -> str:
    import os

    full = os.path.abspath(path)
    rel = os.path.relpath(full, os.path.abspath(root))
    if rel == ".." or rel.startswith("../"):
        raise ValueError(f"{path}: outside the repository {root}")
    return rel.replace(os.sep, "/")
