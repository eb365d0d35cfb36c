"""Which environment variables a `sandboy run` reads: the plan cache's environment key (ADR 0028).

A kept plan must be what a build would give now. The build reads a few variables (HOME for
`{home}` and the cache directory, PATH, XDG_*, GIT_CONFIG_*, SANDBOY_*, …); keying an entry with
the whole environment made every unrelated change (OLDPWD after a `cd`, bash's `_`, SHLVL, a CI's
job id) a miss. So `sandboy run` puts a `Recording` in `os.environ`'s place before it reads
anything (`start`): every lookup by name (`[]`, `get`, `in`, found or absent; `os.getenv`,
`os.path.expanduser`, `tempfile`, `getpass` and `shutil.which` go through `os.environ`) is kept,
and the entry is keyed with the values of exactly those names. Any access that sees the whole
environment (iteration, `len`, `keys`/`items`/`values`, `copy`, a write, any other attribute such
as `_data`) sets `everything`: that entry is keyed with all of it, as before.

What a Recording cannot see, and why it does not matter (ADR 0028, "Session 12"): the reads
before `start` — the interpreter's start-up (its locale: `READ_AT_START_UP`, always in the key;
`PYTHON*`: its effects, `sys.flags` and `sys.path`, are in the key) and the imports of `sandboy`,
`sandboy.cli` and `sandboy.errors` (none reads the environment); `os.environb` and
`posix.environ` (nothing on the run path reads them); C code's getenv(3) and a subprocess
inheriting the environment (the run path starts none before its command, and the C executor
reads no variable). `tests/cage/test_plan_cache_env.py` checks, from a recorder of its own put in
place before `sandboy` is imported, that every name a whole run reads is in its entry's names.

The variables the policy passes to the command are not the build's: `compile_environment` reads
them from the real mapping (`real`), and a hit takes them from today's environment
(`command_env`), as a build would.
"""

import os
from _collections_abc import MutableMapping  # (what os._Environ derives from: imported already)

# The interpreter's locale, set from these at start-up before any Python code runs (the
# encoding of text files the build may read); keyed in every entry.
READ_AT_START_UP = ("LANG", "LC_ALL", "LC_CTYPE")


class Recording(MutableMapping):
    """`os.environ` during a `sandboy run`: the real mapping's answers, with every name looked up
    kept in `names` and `everything` set by any access that sees more than one name."""

    __slots__ = ("real", "names", "everything")

    def __init__(self, real):
        self.real = real
        self.names: dict = {}  # (a dict: insertion-ordered, and faster to add to than a set)
        self.everything = False

    def _look(self, name) -> None:
        if type(name) is str:
            self.names[name] = None
        else:  # (bytes: a name os.environ refuses anyway; whatever it is, it is not one we key)
            self.everything = True

    def __getitem__(self, name):
        self._look(name)
        return self.real[name]

    def get(self, name, default=None):
        self._look(name)
        return self.real.get(name, default)

    def __contains__(self, name) -> bool:
        self._look(name)
        return name in self.real

    # Everything else sees the whole environment (or changes it): keyed with all of it.
    def _all(self):
        self.everything = True
        return self.real

    def __iter__(self):
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __setitem__(self, name, value) -> None:
        self._all()[name] = value

    def __delitem__(self, name) -> None:
        del self._all()[name]

    def copy(self) -> dict:
        return self._all().copy()

    def __repr__(self) -> str:
        return repr(self._all())

    def __or__(self, other):
        return self._all() | other

    def __ror__(self, other):
        return other | self._all()

    def __ior__(self, other):
        self._all().__ior__(other)
        return self

    def __getattr__(self, attribute):  # `_data`, `encodekey`, …: the whole environment behind them
        return getattr(self._all(), attribute)


def command_env(passed, set_pairs, environ) -> dict:
    """The command's environment: each name of `passed` (env.pass) that `environ` has, with its
    value there, then the `set_pairs` (env.set, placeholders replaced) over them. THE rule: the
    build's `protections.compile_environment` and a plan cache hit (`plan_cache._ready`, from
    today's environment: a passed variable is the command's, not an input of the build) both
    call it, so a hit passes what a build would."""
    env = {name: environ[name] for name in passed if name in environ}
    env.update(set_pairs)
    return env


def start() -> Recording:
    """A new Recording in `os.environ`'s place (also `os.getenv`'s: the same module global)."""
    recording = Recording(real())
    os.environ = recording
    return recording


def stop(recording: Recording) -> None:
    """`os.environ` as before `start` (an in-process caller of `sandboy run`'s `main`)."""
    if os.environ is recording:
        os.environ = recording.real


def recording():
    """The Recording in place, or None."""
    environ = os.environ
    return environ if type(environ) is Recording else None


def real():
    """The mapping a Recording stands in for (os.environ itself where none is in place): for the
    reads that are not the build's (the passed variables, the key's own digest)."""
    environ = os.environ
    while type(environ) is Recording:
        environ = environ.real
    return environ
