"""Write the targets' files, or compare them with what is on disk (`check`).

Ownership of entries merged into files the user shares with us (Claude's settings, Codex's
config), and the list of files generated, are recorded in `.sandboy/owned.json`, itself a
generated file: so a target dropped from the policy has its files removed (an ignore file, only
while it still carries the generated marker) or its entries taken out (Claude, Codex), and an
`.aiexclude` that would now be empty is removed rather than left with old patterns."""

import json
import os

from sandboy.capability.targets import TARGETS
from sandboy.capability.targets.policy_files import POLICY_FILES, policy_file_of
from sandboy.capability.targets.target import MARKER
from sandboy.capability.targets.sandboy import AGENT
from sandboy.errors import PolicyError
from sandboy.paths import is_within

OWNED = ".sandboy/owned.json"
REMOVE = "\0remove"  # a value of render(): this generated file must not exist any more


def _inside(root: str, rel: str) -> str:
    """ROOT/rel, refusing a path that leaves the repository through a symlink (a repository's
    `.claude` could point at ~/.ssh: compile must never read or write there)."""
    path = os.path.join(root, rel)
    parent = os.path.realpath(os.path.dirname(path))
    if os.path.islink(path) or not is_within(parent, os.path.realpath(root)):
        raise PolicyError(rel, "", "is a symlink or lies under one that leaves the repository: "
                          "refusing to follow it (replace it with a plain file or directory)")
    return path


MAX_READ = 4 << 20


def _read_text(rel: str, path: str):
    """The text of the repository's file at `path` (ROOT/rel, from `_inside`), or None when it
    does not exist. Only a regular file, opened without blocking and without following a last
    symlink: a FIFO the repository ships at `.cursorignore` or `.claude/settings.json` hung
    `policy compile` and `check` (no writer ever comes), a directory there ended it with
    "cannot write the output". At most MAX_READ bytes (generated files are small)."""
    from sandboy.regular_files import NotRegularFile, read_regular

    try:
        data = read_regular(path, MAX_READ)
    except FileNotFoundError:
        return None
    except NotRegularFile:
        raise PolicyError(rel, "", "is not a regular file (a FIFO, a device, a directory...): "
                          "remove it, compile writes a plain file there") from None
    except OSError as exc:
        raise PolicyError(rel, "", f"cannot read: {exc.strerror}; replace it with a plain file") from None
    if data is None:
        raise PolicyError(rel, "", f"is larger than {MAX_READ} bytes: not a file compile generates or merges into")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise PolicyError(rel, "", "cannot read: not UTF-8") from None


def _clean_owned(record) -> dict:
    """Only the shapes Sandboy writes; anything else in a (hand-edited) owned.json is ignored."""
    if not isinstance(record, dict):
        return {}
    out = {}
    for key, value in record.items():
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            out[key] = value
        elif isinstance(value, (bool, str)):
            out[key] = value
    return out


class Context:
    def __init__(self, root: str):
        self.root = root
        try:
            self.previous = json.loads(_read_text(OWNED, _inside(root, OWNED)) or "{}")
            if not isinstance(self.previous, dict):
                self.previous = {}
        except (PolicyError, ValueError, RecursionError):  # RecursionError: `[[[[…` nested 200,000 deep
            self.previous = {}  # start afresh; write() refuses a non-regular file there
        self.now = {}
        self.warnings = []

    def read(self, rel: str):
        return _read_text(rel, _inside(self.root, rel))

    def owned(self, rel: str) -> dict:
        return _clean_owned(self.previous.get(rel, {}))

    def own(self, rel: str, record: dict) -> None:
        self.now[rel] = record


def _ours(text) -> bool:
    return text is not None and MARKER in "\n".join(text.splitlines()[:2])


# The targets whose files grant writes (Claude's allowWrite/Edit(), Codex's "write" entries, the
# cage's write roots); an ignore file says nothing about writing.
GRANTING_TARGETS = ("claude", "codex", "sandboy")


MAX_LINK_SCAN = 200_000  # entries of the checkout looked at for links a glob write root matches
MAX_LINK_MATCH_WORK = 4_000_000  # pattern segments x link depth, for all of them: ≈ 1-2 s here


def refuse_write_roots_leading_out(policy, root: str, warnings=None) -> None:
    """PolicyError (exit 2) for a write.allow root that a symlink in the checkout leads out of the
    repository, or to the repository itself or the policy files. `write.allow = ["/src"]` with a
    committed `src -> ~/work` was written as `"./src"` into Claude Code's allowWrite and as
    `"src" = "write"` into the Codex profile — their sandboxes resolve the link: the operator's
    ~/work — while `explain src/x` said "inside a write root" and the cage refuses that root at
    launch (ADR 0026). A repository path stays inside the repository, for every target (session
    11). Looked up: the literal part of each anchored pattern (the segments before the first `*`),
    and, where Claude Code or Codex is a target, every symlink in the checkout a glob pattern
    matches itself (`build/` with `docs/build -> ~`: a matcher that expands the glob binds the
    link's target). Links below a root need no look-up: the kernel resolves them inside the
    agents' sandboxes as in the cage. Past MAX_LINK_SCAN entries the rest is named in a warning."""
    from sandboy.repository_files import OutsideRepository, resolve_inside

    if not any(name in GRANTING_TARGETS for name in policy.targets):
        return

    def judge(i, pattern, rel, literal):
        try:
            reached = resolve_inside(root, rel, policy.source, f"write.allow[{i}]")
        except OutsideRepository as exc:
            raise PolicyError(policy.source, f"write.allow[{i}]", f"{pattern.text!r}: the checkout's symlink "
                              f"{exc.link!r} leads outside the repository: the agents' sandboxes would grant "
                              "writing where it points, and the cage refuses it; write the path inside the "
                              "repository, or remove the link") from None
        # `src -> .` or `src -> .sandboy`: the root the agents' files grant is the repository, or
        # holds or lies in the policy files, which no target lets an agent write (the cage keeps
        # them whatever its roots; an agent's matcher may judge the path as written)
        where = os.path.relpath(reached, os.path.realpath(root)).replace(os.sep, "/")
        if literal and where == rel:
            return  # no link on the way (a policy file named as written grants nothing: fidelity says so)
        if where == "." or policy_file_of(where) or any(is_within(own, where) for own in POLICY_FILES):
            raise PolicyError(policy.source, f"write.allow[{i}]", f"{pattern.text!r}: the checkout links "
                              f"{rel!r} to {where!r}, {'the whole repository' if where == '.' else 'the policy files'}: "
                              "a write root there would let an agent rewrite its next run's policy; write the "
                              "path of a directory of its own, or remove the link")

    globs = []
    for i, pattern in enumerate(policy.write_allow):
        literal = []
        for segment in pattern.body.split("/") if pattern.anchored else ():
            if "*" in segment:
                break
            literal.append(segment)
        if literal:
            judge(i, pattern, "/".join(literal), literal=True)
        if not pattern.is_literal() and pattern.body != "/".join([*literal, "**"]):
            globs.append((i, pattern))  # (`/src/**` is the root `src`: judged above)
    if globs and any(name in ("claude", "codex") for name in policy.targets):
        # every glob against every link: the repository chooses how many of each and how deep
        # (5,000 globs x 20,000 links was hours): a match costs about its segments x the link's
        # depth, and all of them together at most MAX_LINK_MATCH_WORK
        work, per_level = 0, sum(pattern.segment_count + 1 for _, pattern in globs)
        for rel in _links_in_checkout(root):
            if rel is not None:
                work += per_level * (rel.count("/") + 2)
            if rel is None or work > MAX_LINK_MATCH_WORK:  # the bounds
                if warnings is not None:
                    why = (f"the checkout has more than {MAX_LINK_SCAN} entries" if rel is None else
                           "matching every write.allow glob against every symlink of the checkout takes too long")
                    warnings.append(f"{why}: symlinks a write.allow glob matches were not all looked for (a link "
                                    "out would be a write root outside the repository for Claude Code or Codex); "
                                    "write those write.allow entries as directories (`src/**`, judged without "
                                    "the scan) to have them all checked")
                return
            for i, pattern in globs:
                if pattern.matches(rel, True):
                    judge(i, pattern, rel, literal=False)


def _links_in_checkout(root: str):
    """The repository-relative path of every symlink in the checkout (no link followed, `.git`
    left out), then None if MAX_LINK_SCAN entries were looked at before the end."""
    pending, seen = [""], 0
    while pending:
        rel = pending.pop()
        try:
            entries = os.scandir(os.path.join(root, rel) if rel else root)
        except OSError:
            continue
        with entries:
            for entry in entries:
                seen += 1
                if seen > MAX_LINK_SCAN:
                    yield None
                    return
                path = f"{rel}/{entry.name}" if rel else entry.name
                if path == ".git":
                    continue
                if entry.is_symlink():
                    yield path
                elif entry.is_dir(follow_symlinks=False):
                    pending.append(path)


def render(policy, root: str, warnings=None) -> dict:
    """{relative path: wanted text, REMOVE, or None (not written, not there)} for every target.
    What a target found that weakens it on the user's side is appended to `warnings`."""
    refuse_write_roots_leading_out(policy, root, warnings)
    ctx = Context(root)
    ctx.warnings = warnings if warnings is not None else []
    from sandboy.capability.model import lookalike_warnings

    ctx.warnings.extend(lookalike_warnings(policy))
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
    # only names compile could have written: a cloned repository's owned.json naming `../x` or
    # an absolute path made every compile and check stop (exit 2) on a message about symlinks
    previous = [rel for rel in (previous if isinstance(previous, list) else ())
                if isinstance(rel, str) and rel and not rel.startswith("/") and ".." not in rel.split("/")]
    for rel in (*files, *previous):
        if files.get(rel) is None and rel not in ctx.now and _ours(ctx.read(rel)):
            files[rel] = REMOVE
    # Whole files of the targets the policy does not name, whatever owned.json says (a cloned
    # repository writes owned.json too): one carrying the generated marker is removed — the
    # repository shipped `.sandboy/agent.toml` "generated from owen.policy.toml" granting `/`
    # and the operator's home, left out `sandboy` from targets and from owned.json, and compile
    # kept it while `check` said "generated files match owen.policy.toml" (session 10).
    for name, target in TARGETS.items():
        if name in policy.targets:
            continue
        for rel in target.files:
            if rel in files:
                continue
            try:
                text = ctx.read(rel)
            except PolicyError:  # a FIFO or directory there: not ours, and not read
                continue
            if hasattr(target, "retract"):  # a shared file (retract takes out what we own)
                if _ours(text):  # the marker, though the policy generates nothing there now
                    ctx.warnings.append(f"{rel} says it is generated from owen.policy.toml, but its target "
                                        f"{name!r} is not in targets: nothing in it is the policy's; read it "
                                        "before running its agent here")
                continue
            if _ours(text):
                files[rel] = REMOVE
            elif rel == AGENT and text is not None:
                ctx.warnings.append(f"{AGENT} exists but is not generated from owen.policy.toml (its target "
                                    "'sandboy' is not in targets): what it grants is the repository's own, "
                                    "not the policy's; read it before running anything under it")
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
        path = _inside(root, rel)
        if text == REMOVE:
            os.remove(path)
            written.append(rel)
            continue
        if _read_text(rel, path) == text:
            continue
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            path = _inside(root, rel)  # again: the directory may have just been made
            tmp = path + ".sandboy-tmp"
            try:
                os.unlink(tmp)  # whatever a repository left there (a symlink, say) is not followed
            except FileNotFoundError:
                pass
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, path)
        except OSError as exc:
            # a directory the repository ships at `X.sandboy-tmp`, a dangling `.claude` link: was
            # "sandboy: cannot write the output: Is a directory" (exit 74), naming no file
            where = exc.filename if isinstance(exc.filename, str) else path
            raise PolicyError(rel, "", f"cannot write {os.path.relpath(where, root)}: {exc.strerror}; "
                              "remove what is there, compile writes a plain file") from None
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
