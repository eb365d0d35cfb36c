"""The seal on every file of Sandboy's cache (ADR 0030): a keyed MAC under a per-user secret that
no checkout and no cage can have written or can read.

Owner and mode (`_libc.read_private`) tell nothing of who wrote a file: a git checkout writes
regular files of the operator's, 0644 in 0755 directories, and so does any earlier cage of the same
uid granted a directory before it became the cache. With the cache in a working copy
(`SANDBOY_CACHE_DIR={cwd}/.cache`, `XDG_CACHE_HOME` or `HOME` in a CI workspace) a repository that
shipped `.cache/policies/<name>.marshal` ran under a policy table of its choosing (redcage13). Now
each file is `tag || body`, the tag keyed BLAKE2b-256 (`_libc.mac`) over what the file IS — the
seal's format, the folder's last name (its kind: `plans`, `walks`, `policies`, ...) and the file's
name — and its body. A file without a valid tag is a miss, never trusted, never an error; one
copied under another name is a miss too.

The secret: 32 random bytes, a "user" key in the kernel's user keyring (@u) made by the first
Sandboy that needs it (`_libc.user_key`). A cage cannot ask for it: keyctl, add_key and
request_key are refused by every cage's seccomp (`seccomp.DEFAULT_DENY`), and a policy may not
allow them (`policy.load`: exit 2). Where the keyring cannot be used (a container's seccomp refuses
keyctl, as Docker's default profile does) there is no secret: nothing is read from the cache and
nothing written — every run builds, as with `SANDBOY_PLAN_CACHE=0` — and `sandboy doctor` says so.
"""

import os

from sandboy.confine import _libc

TAG_BYTES = 32
FORMAT = b"sandboy cache seal 1\0"
# Possessor: view and search; this uid: view, read and search. Not the possessor's read alone: a
# session keyring that does not link @u (systemd's KeyringMode=private, `keyctl new_session`) would
# then leave Sandboy without its key (measured: docs/adr/0030).
KEY_PERM = 0x090B0000
_SECRET: list = []  # [bytes or None]: asked once a process


def description() -> bytes:
    """The key's description in @u: one secret per euid (the keyring is the real uid's)."""
    return b"sandboy:cache-seal:%d" % os.geteuid()


def secret():
    """This user's secret (made on first use), or None where the keyring cannot be used."""
    if not _SECRET:
        _SECRET.append(_libc.user_key(description(), KEY_PERM))
    return _SECRET[0]


def _label(folder: str, name: str) -> bytes:
    kind = os.path.basename(folder.rstrip("/"))
    return FORMAT + os.fsencode(kind) + b"/" + os.fsencode(name)


def seal(folder: str, name: str, body) -> bytes | None:
    """What to write as the file `name` of `folder` holding `body`; None without a secret (then
    nothing is written: no file could be trusted back)."""
    key = secret()
    if key is None:
        return None
    return _libc.mac(key, _label(folder, name), body) + body


def unseal(path: str, data: bytes):
    """The body of the cache file `path` whose bytes are `data`, or None: no secret, or a tag
    that is not this user's for this name and body (a file Sandboy did not write there)."""
    key = secret()
    if key is None or len(data) < TAG_BYTES:
        return None
    body = data[TAG_BYTES:]
    tag = _libc.mac(key, _label(*os.path.split(path)), body)
    # (one 32-byte comparison: nothing outside the process sees how long it took)
    return body if tag == data[:TAG_BYTES] else None


def status() -> str:
    """One line for `sandboy doctor` / `--status-json`: whether the cache is used, and why not."""
    if secret() is None:
        return ("off: the kernel's user keyring cannot be used here (keyctl refused or unsupported), "
                "so no cache file can be trusted — every run is built (ADR 0030)")
    return "sealed with this user's key in the kernel's user keyring (ADR 0030)"
