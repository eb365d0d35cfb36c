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
from sandboy.policy.load import kind_of, check_allowed_domain, checked_table, read_bounded, unknown_key
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
MAX_PATTERN_SEGMENTS = 64


class Pattern:
    """One path pattern of the policy, parsed once; `covers(path)` is THE canonical decision."""

    __slots__ = ("text", "body", "anchored", "dir_only", "negated", "_segments")

    def __init__(self, text: str, body: str, anchored: bool, dir_only: bool, negated=False):
        self.text, self.body, self.anchored, self.dir_only = text, body, anchored, dir_only
        self.negated = negated
        segments = body.split("/")
        # a pattern without an inner `/` matches at any depth: a leading `**` of its own
        self._segments = tuple(segments) if anchored else ("**", *segments)

    def gitignore(self) -> str:
        """The pattern as a gitignore line (anchored ones spelled with a leading `/`)."""
        return ("!" if self.negated else "") + ("/" if self.anchored else "") + self.body + ("/" if self.dir_only else "")

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    def is_literal(self) -> bool:
        return self.anchored and "*" not in self.body

    def matches(self, path: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        parts = path.split("/")
        return len(parts) in _matching_prefixes(self._segments, parts)

    def covers(self, path: str, is_dir: bool = False) -> bool:
        """True when the pattern matches `path` (relative, `/`-separated) or a directory above it
        (gitignore: excluding a directory excludes everything in it)."""
        parts = path.strip("/").split("/")
        n, prefixes = len(parts), _matching_prefixes(self._segments, parts)
        return any(k < n for k in prefixes) or (n in prefixes and (is_dir or not self.dir_only))

    def prefixes(self, parts: list) -> set:
        """Each k such that the pattern matches the first k of `parts` (as a path, `dir_only`
        not looked at): one pass for the path and every directory above it."""
        return _matching_prefixes(self._segments, parts)

    def __repr__(self):
        return f"Pattern({self.text!r})"


def decide(patterns, path: str, is_dir: bool = False):
    """git's rule over an ordered list that may hold `!` re-includes: the pattern that decides
    `path` (a negated one = re-included), or None. A directory excluded above `path` decides,
    whatever comes later: git does not look inside an excluded directory."""
    parts = path.strip("/").split("/")
    n = len(parts)
    matched = [(p, p.prefixes(parts)) for p in patterns]
    for i in range(1, n + 1):
        leaf_is_dir = is_dir if i == n else True
        last = None
        for p, prefixes in matched:
            if i in prefixes and (leaf_is_dir or not p.dir_only):
                last = p
        if last is not None and (i == n or not last.negated):
            return last
    return None


def _matching_prefixes(pattern: tuple, parts: list) -> set:
    """Each k (1..len(parts)) such that `parts[:k]` matches the pattern's segments: `**` is zero or
    more non-empty segments (one or more segments of any kind when it ends the pattern:
    everything below), `*` any run of characters within one segment.

    Not a regular expression: the repository writes owen.policy.toml AND the checkout whose
    symlinks compile matches against its write.allow globs, and the backtracking regex this
    replaced (`(?:[^/]+/)*` per `**`, `[^/]*` per `*`) took exponential time —
    `/**/**/**/**/**/**/**/**/**/**/**/**/gen/*` against one link 30 directories deep held
    `sandboy policy check` for more than a minute of CPU (for ever at a few more `**`; redinput12).
    Here each pattern segment moves a set of reachable path positions forward once: at most
    segments x parts steps, each a linear scan of one name. A step only ever looks at the name it
    consumes, so the positions reached at the end are the matching prefixes, all in one pass."""
    n = len(parts)
    states = {0}
    for i, seg in enumerate(pattern):
        if seg == "**":
            if i == len(pattern) - 1:
                return set(range(min(states) + 1, n + 1))
            reached, reachable = set(), False
            for k in range(min(states), n + 1):
                # k is reachable: a state itself, or one non-empty segment after a reachable k - 1
                reachable = k in states or (reachable and parts[k - 1] != "")
                if reachable:
                    reached.add(k)
            states = reached
        else:
            states = {j + 1 for j in states if j < n and _match_name(seg, parts[j])}
        if not states:
            return states
    return states


def _match_name(seg: str, name: str) -> bool:
    """`seg` with `*` (any characters, `/` never among them) against one name, in linear time:
    with `*` the only wildcard, the leftmost place of each piece between stars is as good as any."""
    if "*" not in seg:
        return seg == name
    pieces = seg.split("*")
    head, tail = pieces[0], pieces[-1]
    if len(head) + len(tail) > len(name) or not name.startswith(head) or not name.endswith(tail):
        return False
    at, end = len(head), len(name) - len(tail)
    for piece in pieces[1:-1]:
        found = name.find(piece, at, end)
        if found < 0:
            return False
        at = found + len(piece)
    return True


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
    if len(segments) > MAX_PATTERN_SEGMENTS:
        # each segment is a step of every match, against every path compile and explain look at
        # (every symlink of the checkout, for a write.allow glob): the repository chooses both
        raise PolicyError(src, key, f"{text[:80]!r}…: {len(segments):,} segments; a pattern has at most "
                          f"{MAX_PATTERN_SEGMENTS} (no repository path is that deep)")
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
    check_allowed_domain(src, key, value)  # agents' files allow what it names: no `*.com` (session 13)
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
