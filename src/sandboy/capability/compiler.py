"""Write the targets' files, or compare them with what is on disk (`check`).

Ownership of entries merged into files the user shares with us (Claude's settings, Codex's
config), and the list of files generated, are recorded in `.sandboy/owned.json`, itself a
generated file: so a target dropped from the policy has its files removed (an ignore file, only
while it still carries the generated marker) or its entries taken out (Claude, Codex), and an
`.aiexclude` that would now be empty is removed rather than left with old patterns."""

import json
import os

from sandboy.capability.targets import MARKER, TARGETS

OWNED = ".sandboy/owned.json"
REMOVE = "\0remove"  # a value of render(): this generated file must not exist any more


class Context:
    def __init__(self, root: str):
        self.root = root
        try:
            with open(os.path.join(root, OWNED), encoding="utf-8") as fh:
                self.previous = json.load(fh)
            if not isinstance(self.previous, dict):
                self.previous = {}
        except (OSError, ValueError):
            self.previous = {}
        self.now = {}

    def read(self, rel: str):
        try:
            with open(os.path.join(self.root, rel), encoding="utf-8") as fh:
                return fh.read()
        except FileNotFoundError:
            return None

    def owned(self, rel: str) -> dict:
        value = self.previous.get(rel, {})
        return value if isinstance(value, dict) else {}

    def own(self, rel: str, record: dict) -> None:
        self.now[rel] = record


def _ours(text) -> bool:
    return text is not None and MARKER in "\n".join(text.splitlines()[:2])


def render(policy, root: str) -> dict:
    """{relative path: wanted text, REMOVE, or None (not written, not there)} for every target."""
    ctx = Context(root)
    files, retracted = {}, set()
    for name in policy.targets:
        files.update(TARGETS[name].render(policy, ctx))
    for name, target in TARGETS.items():
        # a shared file's entries from a target the policy no longer names
        if name not in policy.targets and hasattr(target, "retract") and any(ctx.owned(f) for f in target.files):
            out = target.retract(ctx)
            files.update(out)
            retracted.update(out)
    previous = ctx.previous.get("files", [])
    for rel in (*files, *(previous if isinstance(previous, list) else ())):
        if files.get(rel) is None and rel not in ctx.now and _ours(ctx.read(rel)):
            files[rel] = REMOVE
    record = dict(ctx.now)
    record["files"] = sorted(rel for rel, text in files.items()
                            if text not in (None, REMOVE) and rel not in retracted)
    files[OWNED] = json.dumps(record, indent=2, sort_keys=True) + "\n"
    return files


def write(files: dict, root: str) -> list:
    """Write what differs; returns the paths written."""
    written = []
    for rel, text in files.items():
        if text is None:
            continue
        path = os.path.join(root, rel)
        if text == REMOVE:
            os.remove(path)
            written.append(rel)
            continue
        try:
            with open(path, encoding="utf-8") as fh:
                if fh.read() == text:
                    continue
        except FileNotFoundError:
            pass
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = path + ".sandboy-tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
        written.append(rel)
    return written


def drift(files: dict, root: str) -> list:
    """Unified diffs (one string per drifted file) between the disk and what compile would write."""
    import difflib

    ctx = Context(root)
    out = []
    for rel, text in files.items():
        current = ctx.read(rel)
        if text is None:
            continue
        if text == REMOVE:
            out.append("".join(difflib.unified_diff(current.splitlines(True), [], fromfile=f"a/{rel}",
                                                    tofile="/dev/null")))
        elif current != text:
            out.append("".join(difflib.unified_diff(
                (current or "").splitlines(True), text.splitlines(True),
                fromfile=f"a/{rel}" if current is not None else "/dev/null", tofile=f"b/{rel}")))
    return out
