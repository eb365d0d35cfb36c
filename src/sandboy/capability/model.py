"""`owen.policy.toml`: the canonical capability policy, strictly validated, and its path rule.

Patterns are a gitignore subset every target can say the same way: `*` within one path
segment, `**` as a whole segment, a trailing `/` for "this directory and everything in it", a
pattern without an inner `/` matching at any depth, one with an inner (or leading) `/` anchored to
the repository root. In read.deny only, `!pattern` re-includes as in git: the last matching line
decides, and nothing inside an excluded directory can be re-included. Claude Code, Codex and the
cage cannot make such an exception: there the path stays denied (stricter), and the fidelity table
says so. Not accepted, each with its reason in the error: `!` elsewhere, `[...]` classes, `\\`
escapes and `?` (the targets disagree on them), `..`, control characters, `{`/`}` (placeholders in the
cage's step policy, brace expansion in some matchers).
"""

import re

from sandboy.errors import PolicyError
from sandboy.policy.load import kind_of, check_domain, checked_table, read_bounded, unknown_key
from sandboy.policy.toml_file import parse_toml

POLICY_FILE = "owen.policy.toml"
TOP_KEYS = ("version", "targets", "read", "index", "write", "exec", "network", "codex", "sandboy")
SECTION_KEYS = {
    "read": ("deny",),
    "index": ("exclude",),
    "write": ("allow", "deny"),
    "exec": ("allow", "deny"),
    "network": ("domains",),
    "codex": ("profile",),
    "sandboy": ("include",),
}
DEFAULT_INCLUDE = ("system", "python", "git")


class Pattern:
    """One path pattern of the policy, parsed once; `covers(path)` is THE canonical decision."""

    __slots__ = ("text", "body", "anchored", "dir_only", "negated", "_regex")

    def __init__(self, text: str, body: str, anchored: bool, dir_only: bool, negated=False):
        self.text, self.body, self.anchored, self.dir_only = text, body, anchored, dir_only
        self.negated = negated
        self._regex = re.compile(_to_regex(body, anchored))

    def gitignore(self) -> str:
        """The pattern as a gitignore line (anchored ones spelled with a leading `/`)."""
        return ("!" if self.negated else "") + ("/" if self.anchored else "") + self.body + ("/" if self.dir_only else "")

    def is_literal(self) -> bool:
        return self.anchored and "*" not in self.body

    def matches(self, path: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        return self._regex.fullmatch(path) is not None

    def covers(self, path: str, is_dir: bool = False) -> bool:
        """True when the pattern matches `path` (relative, `/`-separated) or a directory above it
        (gitignore: excluding a directory excludes everything in it)."""
        parts = path.strip("/").split("/")
        for i in range(1, len(parts)):
            if self.matches("/".join(parts[:i]), True):
                return True
        return self.matches("/".join(parts), is_dir)

    def __repr__(self):
        return f"Pattern({self.text!r})"


def decide(patterns, path: str, is_dir: bool = False):
    """git's rule over an ordered list that may hold `!` re-includes: the pattern that decides
    `path` (a negated one = re-included), or None. A directory excluded above `path` decides,
    whatever comes later: git does not look inside an excluded directory."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts) + 1):
        here = "/".join(parts[:i])
        leaf_is_dir = is_dir if i == len(parts) else True
        last = None
        for p in patterns:
            if p.matches(here, leaf_is_dir):
                last = p
        if last is not None and (i == len(parts) or not last.negated):
            return last
    return None


def _to_regex(body: str, anchored: bool) -> str:
    out = []
    segments = body.split("/")
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        if seg == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
            continue
        piece = "".join("[^/]*" if c == "*" else re.escape(c) for c in seg)
        out.append(piece if last else piece + "/")
    regex = "".join(out)
    return regex if anchored else "(?:[^/]+/)*" + regex


def parse_pattern(src: str, key: str, text, negatable=False) -> Pattern:
    if not isinstance(text, str):
        raise PolicyError(src, key, f"expected a path pattern (a string), got {kind_of(text)}")
    problem = None
    if not text or text.strip() != text:
        problem = "empty, or begins/ends with blanks"
    elif text.startswith("!") and not negatable:
        problem = ("'!' re-includes are accepted in read.deny only (here they would silently change "
                   "what the combined ignore files hide); list what to cover instead")
    elif text.startswith("#"):
        problem = "a pattern cannot start with '#' (a comment in every ignore file)"
    elif any(c in text for c in "[]\\") or not text.isprintable():
        problem = "'[...]' classes, '\\' escapes and control characters are not accepted (the targets disagree on them)"
    elif "?" in text:
        # session 10: git's matcher (every ignore file) takes `?` as one BYTE, JavaScript matchers
        # as one UTF-16 unit, the cage and Codex as one character: `?.env` hid `a.env` everywhere
        # but `é.env` (two bytes) only in the cage, while `explain` said every target hid it
        problem = ("'?' is not accepted: the targets disagree on it for a name with a non-ASCII character "
                   "(one byte for git and the ignore files, one UTF-16 unit for JavaScript matchers, one "
                   "character for the cage); spell the name out, or use '*' where matching more is what you mean")
    elif any(c in text for c in "{}"):
        # `.sandboy/agent.toml` carries write.allow and write.deny as cage paths, where `{home}`,
        # `{tmp}`, `{cwd}`... are placeholders: `/{home}` in write.allow made the cage grant the
        # operator's home; and some agents' matchers expand `{a,b}` while git does not
        problem = ("'{' and '}' are not accepted: the cage's step policy reads '{home}', '{tmp}'... as "
                   "placeholders (the pattern would name a path outside the repository) and some "
                   "matchers expand '{a,b}' while git does not")
    if problem:
        raise PolicyError(src, key, f"{text!r}: {problem}")
    negated = text.startswith("!")
    dir_only = text.endswith("/")
    body = text[negated:].strip("/")
    anchored = text[negated:].startswith("/") or "/" in body
    segments = body.split("/")
    for seg in segments:
        if seg in ("", ".", ".."):
            raise PolicyError(src, key, f"{text!r}: empty, '.' or '..' segment (write paths relative to the repository root)")
        if "**" in seg and seg != "**":
            raise PolicyError(src, key, f"{text!r}: '**' must be a whole segment (as in 'a/**/b')")
    if body == "**":
        raise PolicyError(src, key, f"{text!r}: matches everything; name what to cover")
    return Pattern(text, body, anchored, dir_only, negated)


class ExecRule:
    """A command prefix: `npm run test` allows/denies that program with those first arguments."""

    __slots__ = ("text", "words")

    def __init__(self, text: str, words: tuple):
        self.text, self.words = text, words

    def covers(self, argv) -> bool:
        return tuple(argv[: len(self.words)]) == self.words


def parse_exec(src: str, key: str, text) -> ExecRule:
    if not isinstance(text, str):
        raise PolicyError(src, key, f"expected a command prefix (a string), got {kind_of(text)}")
    words = tuple(text.split())
    if not words:
        raise PolicyError(src, key, "empty command prefix")
    if any(c in text for c in "*()\0\n\"'"):
        raise PolicyError(src, key, f"{text!r}: a prefix is plain words (no '*', quotes or parentheses); "
                          "it covers every command that starts with them")
    if not all(word.isprintable() for word in words):
        # as in path patterns (session 10): json.dumps(ensure_ascii=False) wrote a bidi override
        # (U+202E) raw into .claude/settings.json, where a reviewer's editor shows the rule reordered
        raise PolicyError(src, key, f"{text!r}: control, format and other non-printable characters are not "
                          "accepted in a command prefix")
    return ExecRule(" ".join(words), words)


class CapabilityPolicy:
    """The validated policy. Lists keep their order (emitted files follow it)."""

    def __init__(self, source, read_deny, index_exclude, write_allow, write_deny, exec_allow,
                 exec_deny, domains, targets, codex_profile, include, target_options):
        self.source = source
        self.read_deny, self.index_exclude = read_deny, index_exclude
        self.write_allow, self.write_deny = write_allow, write_deny
        self.exec_allow, self.exec_deny = exec_allow, exec_deny
        self.domains, self.targets = domains, targets
        self.codex_profile, self.include = codex_profile, include
        self.target_options = target_options

    # --- the canonical decisions (what every target is compared with) -----------------------

    def read_decision(self, path: str, is_dir=False):
        """The read.deny line deciding `path` (a `!` one = re-included), or None."""
        return decide(self.read_deny, path, is_dir)

    def read_rule(self, path: str, is_dir=False):
        """The read-deny pattern that hides `path`, or None (readable)."""
        hit = decide(self.read_deny, path, is_dir)
        return None if hit is None or hit.negated else hit

    def denied_without_exceptions(self, path: str, is_dir=False):
        """What a target that cannot re-include decides: the first non-negated match."""
        return next((p for p in self.read_deny if not p.negated and p.covers(path, is_dir)), None)

    def index_rule(self, path: str, is_dir=False):
        """The rule keeping `path` out of an agent's index: a read deny or an index exclude."""
        return self.read_rule(path, is_dir) or next(
            (p for p in self.index_exclude if p.covers(path, is_dir)), None)

    def write_rule(self, path: str, is_dir=False):
        """(writable, deciding pattern or reason)."""
        hit = self.read_rule(path, is_dir)
        if hit:
            return False, hit
        hit = next((p for p in self.write_deny if p.covers(path, is_dir)), None)
        if hit:
            return False, hit
        if not self.write_allow:
            return True, "write.allow is absent: the whole repository is writable"
        hit = next((p for p in self.write_allow if p.covers(path, is_dir)), None)
        return (True, hit) if hit else (False, "not under any write.allow entry")


def _list(src, key, value, parse):
    if not isinstance(value, list):
        raise PolicyError(src, key, f"expected a list, got {kind_of(value)}")
    out, seen = [], set()
    for i, item in enumerate(value):
        parsed = parse(src, f"{key}[{i}]", item)
        if parsed.text not in seen:
            seen.add(parsed.text)
            out.append(parsed)
    return tuple(out)


def _domain(src, key, value):
    if not isinstance(value, str):
        raise PolicyError(src, key, f"expected a domain (a string), got {kind_of(value)}")
    check_domain(src, key, value)
    return value.lower()


def _names(src: str, key: str, value, known, kind: str) -> list:
    """`value` if it is a list of names from `known`; else a PolicyError naming `key` (or the
    first unknown `key[i]`, with a "did you mean")."""
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise PolicyError(src, key, f"expected a list of {kind} names, got {kind_of(value)}")
    for i, name in enumerate(value):
        if name not in known:
            raise PolicyError(src, f"{key}[{i}]", unknown_key(name, tuple(known), what=f"{kind} {name!r}"))
    return value


def from_mapping(data: dict, src: str) -> CapabilityPolicy:
    from sandboy.capability.targets import TARGETS

    checked_table(src, "", data, TOP_KEYS)
    if data.get("version") != 1:
        raise PolicyError(src, "version", f"expected version = 1, got {data.get('version')!r}")
    sections = {name: checked_table(src, name, data.get(name, {}), known) for name, known in SECTION_KEYS.items()}
    pat = lambda sec, k: _list(src, f"{sec}.{k}", sections[sec].get(k, []),  # noqa: E731
                               lambda s_, k_, v_: parse_pattern(s_, k_, v_, negatable=(sec, k) == ("read", "deny")))
    ex = lambda k: _list(src, f"exec.{k}", sections["exec"].get(k, []), parse_exec)  # noqa: E731
    domains = sections["network"].get("domains", [])
    if not isinstance(domains, list):
        raise PolicyError(src, "network.domains", f"expected a list of domains, got {kind_of(domains)}")
    domains = tuple(dict.fromkeys(_domain(src, f"network.domains[{i}]", d) for i, d in enumerate(domains)))

    targets = _names(src, "targets", data.get("targets", [t for t, e in TARGETS.items() if e.default]), TARGETS,
                     "target")
    profile = sections["codex"].get("profile", "owen")
    if not isinstance(profile, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", profile):
        raise PolicyError(src, "codex.profile", f"expected a profile name (letters, digits, '-', '_'), got {profile!r}")
    from sandboy.policy.presets import PRESETS

    include = _names(src, "sandboy.include", sections["sandboy"].get("include", list(DEFAULT_INCLUDE)), PRESETS,
                     "preset")
    policy = CapabilityPolicy(
        src, pat("read", "deny"), pat("index", "exclude"), pat("write", "allow"), pat("write", "deny"),
        ex("allow"), ex("deny"), domains, tuple(dict.fromkeys(targets)), profile, tuple(include), {})
    if not any(t in policy.targets for t in TARGETS):
        raise PolicyError(src, "targets", "empty: name at least one target")
    return policy


def _script(ch: str):
    """The script a letter's Unicode name starts with (LATIN, CYRILLIC, GREEK...), None otherwise."""
    import unicodedata

    if not ch.isalpha():
        return None
    return unicodedata.name(ch, "?").split(" ")[0]


def lookalike_warnings(policy) -> list:
    """Patterns with a word that mixes Latin letters with letters of another script (`.\u0435nv`:
    a Cyrillic `е`): printed, in the fidelity table too, they read as `.env`, which they do not
    cover — a repository's owen.policy.toml "denying" `.env` that every target then leaves readable,
    while compile said "enforced" (session 11). Kept (a name may be that), named by compile and check
    with the code points spelled out."""
    out = []
    rules = [("read.deny", policy.read_deny), ("index.exclude", policy.index_exclude),
             ("write.allow", policy.write_allow), ("write.deny", policy.write_deny)]
    for key, patterns in rules:
        for pattern in patterns:
            # one word (a run of letters): `.еnv`, not `секрет.txt` (a Cyrillic name, a Latin extension)
            for word in re.findall(r"[^\W\d_]+", pattern.body):
                scripts = {_script(ch) for ch in word} - {None}
                if "LATIN" in scripts and len(scripts) > 1:
                    spelled = "".join(ch if ch.isascii() else f"\\u{ord(ch):04x}" for ch in pattern.text)
                    out.append(f"{policy.source}: {key} '{spelled}' mixes Latin letters with letters of another "
                               f"script ({', '.join(sorted(scripts - {'LATIN'}))}) in one word: it may read as a "
                               "name it does not cover; spell it in one script")
                    break
    return out


def load(path: str) -> CapabilityPolicy:
    # The step-policy reader: one bounded read (a file over the limit is refused, never cut and
    # parsed), UTF-8, and the TOML guards (long dotted keys, deep nesting) of policy files.
    # A regular file only: the repository's owen.policy.toml as a FIFO hung `policy compile`.
    import os
    import stat

    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
    except OSError as exc:
        raise PolicyError(path, "", f"cannot read: {exc.strerror}") from None
    if not regular:
        raise PolicyError(path, "", "not a regular file")
    return from_mapping(parse_toml(read_bounded(path), path), path)
