"""The suite's private Sandboy cache directory: made by tests/conftest.py before any test module
is imported, checked by tests/test_suite_cache.py and at the session's end (see tests/conftest.py
for why and what is shared)."""

from __future__ import annotations

import os
import tempfile

SHARED = ("components", "cwasm", "timings")
PREFIX = "sandboy-test-cache-"  # + the pytest's pid + a random part
STATE: dict = {}  # real, private, before: set by prepare()


def prepare() -> None:
    from sandboy.policy.resolve import cache_dir

    real = cache_dir()  # the operator's: SANDBOY_CACHE_DIR, XDG_CACHE_HOME or ~/.cache (as Sandboy decides)
    os.makedirs(real, mode=0o700, exist_ok=True)
    for name in SHARED:
        os.makedirs(os.path.join(real, name), mode=0o700, exist_ok=True)
    parent = os.path.dirname(os.path.abspath(real))
    _remove_left_behind(parent)
    prefix = f"{PREFIX}{os.getpid()}-"
    try:
        private = tempfile.mkdtemp(prefix=prefix, dir=parent)  # 0700
    except OSError:  # the real cache's parent is not ours to write: anywhere private will do
        private = tempfile.mkdtemp(prefix=prefix)
    for name in SHARED:
        os.symlink(os.path.join(real, name), os.path.join(private, name))
    STATE.update(real=real, private=private, before=_listing(real))
    os.environ["SANDBOY_CACHE_DIR"] = private


def _remove_left_behind(parent: str) -> None:
    """The private directories of sessions that were killed (no pytest_unconfigure ran): named
    with their pytest's pid, removed once that pid is gone (a live one may be another session)."""
    import shutil

    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        pid = name[len(PREFIX):].split("-", 1)[0]
        if name.startswith(PREFIX) and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            path = os.path.join(parent, name)
            if os.path.isdir(path) and not os.path.islink(path) and os.stat(path).st_uid == os.getuid():
                shutil.rmtree(path, ignore_errors=True)  # (its links are removed, never followed)


def _listing(cache: str) -> dict:
    seen = {}
    for name in ("plans", "policies"):
        try:
            seen[name] = set(os.listdir(os.path.join(cache, name)))
        except OSError:
            seen[name] = set()
    return seen


def new_entries_naming(markers: list[bytes]) -> list[str]:
    """Entries added to the REAL cache's plans/ and policies/ since the suite started that name
    one of `markers` (this session's base temporary directory, this checkout): another
    engineer's run on the same machine adds entries too, and those are not ours."""
    found = []
    real = STATE["real"]
    for name, before in _listing(real).items():
        for entry in sorted(before - STATE["before"][name]):
            try:
                with open(os.path.join(real, name, entry), "rb") as fh:
                    data = fh.read(8 << 20)
            except OSError:
                continue
            if any(marker in data for marker in markers):
                found.append(os.path.join(real, name, entry))
    return found


# --- a cache file's seal (ADR 0030): what tests that forge entries write ------------------------
# Every cache file is `tag || body` (`cache_seal`). A test that forges an entry's CONTENT to probe a
# check behind the seal (the key, the owner, the executor) writes it sealed, as one holding this
# user's key would; an unsealed forgery is a miss by the seal alone (tests/cage/test_cache_seal_kernel.py).

def unsealed(path) -> bytes:
    """The body of the cache file `path` as Sandboy wrote it (its seal checked and stripped)."""
    from sandboy import cache_seal

    body = cache_seal.unseal(os.fspath(path), open(path, "rb").read())
    assert body is not None, f"{path}: not sealed by this user's key"
    return body


def write_sealed(path, body: bytes) -> None:
    """`body` written over the cache file `path` (same inode) with the seal Sandboy would put on it."""
    from sandboy import cache_seal

    folder, name = os.path.split(os.fspath(path))
    with open(path, "wb") as fh:
        fh.write(cache_seal.seal(folder, name, body))
