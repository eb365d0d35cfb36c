"""The gitignore-syntax files: Cursor, Gemini CLI, Aider, Windsurf, JetBrains, `.aiexclude`, and
(only on request) `.agentsignore` / `.codexignore`, which no known agent reads.

They hide paths from an agent's own tools and index. They say nothing about writes or commands,
and nothing stops a shell `cat`: every rule they carry is advisory."""

from sandboy.capability.model import decide
from sandboy.capability.targets.target import ADVISORY, LOST, MARKER, Target, rules
SHELL = "the agent's own tools honour it; a shell command (cat, grep) still reads the file"


class IgnoreTarget(Target):
    def __init__(self, name, agent, files, default=True, index_only_file=None, never_empty=False,
                 read_by_nobody=False):
        self.name, self.agent, self.files, self.default = name, agent, files, default
        self.index_only_file = index_only_file  # Cursor: index.exclude goes to its own file
        self.never_empty = never_empty
        self.read_by_nobody = read_by_nobody

    def _patterns(self, policy, path):
        if self.index_only_file:
            return policy.index_exclude if path == self.index_only_file else policy.read_deny
        return (*policy.read_deny, *policy.index_exclude)

    def render(self, policy, read_existing) -> dict:
        out = {}
        for path in self.files:
            patterns = self._patterns(policy, path)
            if not patterns and self.never_empty:
                # An empty .aiexclude (even one holding only comments) blocks EVERY file.
                out[path] = None
                continue
            lines = [f"# {MARKER}"]
            if self.read_by_nobody:
                lines.append("# NOTE: no known agent reads this file; it is written because the policy asks for it")
            lines += [p.gitignore() for p in patterns]
            out[path] = "\n".join(lines) + "\n"
        return out

    def fidelity(self, policy) -> list:
        out = []
        for key, text, item in rules(policy):
            if self.read_by_nobody and key in ("read.deny", "index.exclude"):
                out.append((key, text, LOST, "no known agent reads this file"))
            elif key == "read.deny":
                where = self.files[0]
                what = ("re-included as in git; inside an excluded directory git keeps the path "
                        "excluded, while some matchers (pathspec) re-include it there, and matchers that "
                        "ignore case (node's `ignore` by default) re-include other spellings too, so "
                        "agents may differ on such paths") if item.negated else SHELL
                out.append((key, text, ADVISORY, f"{where}: {what}"))
            elif key == "index.exclude":
                where = self.index_only_file or self.files[0]
                out.append((key, text, ADVISORY, f"{where}: kept out of the agent's context/index; {SHELL}"))
            elif key.startswith("write."):
                out.append((key, text, LOST, "an ignore file cannot say what may be written"))
            elif key.startswith("exec."):
                out.append((key, text, LOST, "an ignore file cannot say which commands may run"))
            else:
                out.append((key, text, LOST, "an ignore file cannot say which hosts may be reached"))
        return out

    def decide(self, policy, path: str) -> dict:
        reinclude = []

        def first(patterns):
            hit = decide(patterns, path)
            if hit is not None and hit.negated:
                reinclude.append(hit)
            return None if hit is None or hit.negated else hit

        if self.read_by_nobody:
            none = (None, "no known agent reads this file")
            return {"readable": none, "indexable": none, "writable": none}
        read_hit = first(policy.read_deny)
        index_hit = read_hit or first(policy.index_exclude)
        file_of = self.files[0]
        if self.index_only_file:
            index_file = self.index_only_file if not read_hit else file_of
        else:
            index_file = file_of
            # one file: read.deny's lines, then index.exclude's (no `!` there), so an index
            # pattern is never undone by a read.deny re-include
            read_hit = index_hit = first((*policy.read_deny, *policy.index_exclude))
        free = (True, f"{file_of}: re-included by {reinclude[0].gitignore()}") if reinclude else (True, "no pattern matches")
        return {
            "readable": (False, f"{file_of}: {read_hit.gitignore()}") if read_hit else free,
            "indexable": (False, f"{index_file}: {index_hit.gitignore()}") if index_hit else (True, "no pattern matches"),
            "writable": (None, "not expressible in an ignore file"),
        }


TARGETS = (
    IgnoreTarget("cursor", "Cursor", (".cursorignore", ".cursorindexingignore"),
                 index_only_file=".cursorindexingignore"),
    IgnoreTarget("gemini", "Gemini CLI", (".geminiignore",)),
    IgnoreTarget("aider", "Aider", (".aiderignore",)),
    IgnoreTarget("windsurf", "Windsurf", (".codeiumignore",)),
    IgnoreTarget("jetbrains", "JetBrains AI Assistant", (".aiignore",)),
    IgnoreTarget("aiexclude", "Gemini Code Assist / Android Studio", (".aiexclude",), never_empty=True),
    IgnoreTarget("agentsignore", "(none known)", (".agentsignore",), default=False, read_by_nobody=True),
    IgnoreTarget("codexignore", "(none known; Codex reads its config.toml profile)", (".codexignore",),
                 default=False, read_by_nobody=True),
)
