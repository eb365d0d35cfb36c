"""Write the targets' files, or compare them with what is on disk (`check`).

Ownership of entries merged into files the user shares with us (Claude's settings, Codex's
config) is recorded in `.sandboy/owned.json`, itself a generated file."""

import json
import os

from sandboy.capability.targets import TARGETS

OWNED = ".sandboy/owned.json"


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


def render(policy, root: str) -> dict:
    """{relative path: wanted text or None (must not exist as generated)} for every target."""
    ctx = Context(root)
    files = {}
    for name in policy.targets:
        files.update(TARGETS[name].render(policy, ctx))
    if ctx.now:
        files[OWNED] = json.dumps(ctx.now, indent=2, sort_keys=True) + "\n"
    return files


def write(files: dict, root: str) -> list:
    """Write what differs; returns the paths written."""
    written = []
    for rel, text in files.items():
        if text is None:
            continue
        path = os.path.join(root, rel)
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
        if current != text:
            out.append("".join(difflib.unified_diff(
                (current or "").splitlines(True), text.splitlines(True),
                fromfile=f"a/{rel}" if current is not None else "/dev/null", tofile=f"b/{rel}")))
    return out
