"""Paths a repository's own files name, looked up strictly inside the repository.

The repository is untrusted and its files name further paths: `.007/gate.toml` and the policy
files its steps name, `.007/adapters.toml` and each tool's `requires` and configuration files,
`owen.policy.toml`. Sandboy looks them up with the host's rights, so following a symlink there
made the host an oracle or a reader for the repository: `requires = ["k"]` with `k ->
/root/.ssh/id_rsa` skipped the tool or not by whether the key existed (and a configuration file
chosen that way was named in the SARIF), `.007 -> /root/x` read `/root/x/adapters.toml`.

`resolve_inside` therefore follows symlinks one at a time, as the kernel would, and never
lstats, stats or opens a path outside the repository: a link whose target leaves it (absolute,
or through `..`) is refused whether or not the target exists, so the refusal tells nothing.
Links that stay inside work as before. `read_inside` is the one read of such a file: a regular
file only (a FIFO would hang the reader), opened without following a last symlink, bounded
(`regular_files.read_regular`).
"""

from __future__ import annotations

import os
import stat

from sandboy.errors import PolicyError
from sandboy.regular_files import NotRegularFile, read_regular

MAX_LINKS = 40  # the kernel's own limit on symlinks followed in one lookup (ELOOP)


class OutsideRepository(PolicyError):
    """`name` (relative to the repository) leads out of it through the symlink `link`."""

    def __init__(self, source: str, key: str, name: str, link: str):
        self.name, self.link = name, link
        where = f"through the symlink {link!r}" if link else "by its own spelling"
        super().__init__(source, key, f"{name!r} leads outside the repository {where}: not followed "
                         "(a repository's files may only name paths inside it)")


def _parts(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def resolve_inside(root: str, name: str, source: str = "", key: str = "") -> str:
    """The path `name` (relative to `root`, the repository) reaches, symlinks followed only while
    they stay inside `root`; raises OutsideRepository otherwise (`source`, `key`: for its
    message). A component that does not exist ends the lookup: the rest is appended as written
    (the path does not exist either). `root` is the operator's and resolved as given."""
    root = os.path.realpath(root)
    if name.startswith("/") or "\0" in name:
        raise OutsideRepository(source, key, name, "")
    pending = _parts(name)[::-1]  # a stack: the next component last
    current, links, via = root, 0, ""
    while pending:
        part = pending.pop()
        if part == "..":
            if current == root:
                raise OutsideRepository(source, key, name, via)
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, part)
        try:
            mode = os.lstat(candidate).st_mode
        except OSError:
            return os.path.join(candidate, *pending[::-1])
        if not stat.S_ISLNK(mode):
            current = candidate
            continue
        links += 1
        via = os.path.relpath(candidate, root)
        if links > MAX_LINKS:
            raise PolicyError(source, key, f"{name!r}: more than {MAX_LINKS} symlinks in its lookup")
        target = os.readlink(candidate)
        if target.startswith("/"):
            # absolute: it must spell the repository's own path first, component by component
            # (checked as text: nothing outside is looked at)
            given, own = _parts(target), _parts(root)
            if given[:len(own)] != own:
                raise OutsideRepository(source, key, name, via)
            current, rest = root, given[len(own):]
        else:
            rest = _parts(target)
        pending.extend(rest[::-1])
    return current


def read_inside(root: str, name: str, limit: int, source: str = "", key: str = "") -> tuple[str, bytes] | None:
    """(the path read, its bytes) of the repository's file `name`, or None when it does not
    exist. Refused (PolicyError): a lookup leaving the repository, anything but a regular file,
    more than `limit` bytes (never cut)."""
    return read_resolved(resolve_inside(root, name, source, key), name, limit, source, key)


def read_resolved(path: str, name: str, limit: int, source: str = "", key: str = "") -> tuple[str, bytes] | None:
    """`read_inside` of a path `resolve_inside` already gave (for a caller that needed the
    path first: the gate keys its policy files by it)."""
    where = source or path
    try:
        data = read_regular(path, limit)  # the last component not followed (resolve_inside did)
    except FileNotFoundError:
        return None
    except NotRegularFile:
        raise PolicyError(where, key, f"{name!r} is not a regular file") from None
    except OSError as exc:
        raise PolicyError(where, key, f"{name!r}: cannot read: {exc.strerror}") from None
    if data is None:
        raise PolicyError(where, key, f"{name!r}: file is larger than {limit} bytes")
    return path, data


REPO_TOKEN = "{repo}"
_GRANTS = ("read", "exec", "write")


def check_repository_grants(policy, repo: str) -> None:
    """Refuse (OutsideRepository, exit 2) an fs grant spelled `{repo}/...` whose lookup leaves the
    repository through a symlink in it. `{repo}/x` says "x in the repository": the capability
    compiler writes `.sandboy/agent.toml`'s paths so (they come from the repository's
    owen.policy.toml), and a checkout shipping `src -> ~/work` made the write root `src` the
    operator's ~/work (session 7). A grant meant for the target names it by its own path.
    Denies and protected paths only narrow: not checked."""
    from sandboy.paths import is_within

    fs = policy.fs
    for field in _GRANTS:
        for i, raw in enumerate(getattr(fs, field)):
            if is_within(raw, REPO_TOKEN):
                try:
                    resolve_inside(repo, raw[len(REPO_TOKEN):].lstrip("/"), policy.source or "", f"fs.{field}[{i}]")
                except OutsideRepository as exc:
                    raise PolicyError(exc.source, exc.key, f"{raw!r}: {exc.problem}; if the target is meant, "
                                      "grant it by its own path (a {repo} path stays inside the "
                                      "repository)") from None
