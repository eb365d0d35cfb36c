"""Parts of a `sandboy run` build kept apart from the plans: pieces (ADR 0028, session 10).

A miss (another environment, another working directory, a policy's first run) builds the whole
cage again, though some of its parts are made from a handful of inputs that rarely change. The
seccomp program is one (`protections.seccomp_inputs`: the ABI, `seccomp.deny`/`allow`,
`ipc.sysv`, the network rules): kept under a key of exactly those inputs and the code that makes
it from them, a miss whose inputs an earlier run saw imports no BPF assembler (`seccomp` is a
bundle group of its own: ≈ 0.6 ms of a miss). Read and written as the plan cache's entries are
(`plan_cache._open_entry`, `plan_keep.store`: one reader, one writer), in a directory of their
own beside `plans/`. This module is a bundle group of its own too: a hit reads none of it.
"""

import _imp
import marshal
import os
import sys

from sandboy.confine import _libc
from sandboy.confine.fingerprint import inode_identity
from sandboy.confine.plan_cache import _PACKAGE, _open_entry, _served_stats
from sandboy.confine.plan_keep import store
from sandboy.cache_places import cache_dir

PIECE_FORMAT = "sandboy plan piece 1"
_PIECE_NAME_KEY = 0x53424F5950494543  # the SipHash key of pieces' names ("SBOYPIEC")
# the modules whose code makes a kept seccomp program from its inputs (and runs its step): an edit
# of any of them is a miss (by the identity of its file, as `_code_identities`). This module is one:
# it chooses what of a built program is kept and makes the step a miss runs from it (`_seccomp_ready`)
SECCOMP_CODE = ("sandboy.confine.protections", "sandboy.confine.seccomp", "sandboy.policy.syscalls",
                "sandboy.confine._libc", "sandboy.confine._native", "sandboy.confine.plan_pieces")


def pieces_dir() -> str:
    """Where the pieces live: `plan-pieces/` in the cache directory, which every cage is denied."""
    return os.path.join(cache_dir(), "plan-pieces")


def _module_file(name: str) -> str:
    """The file of module `name`: where this process loaded it from, else where it would (a module
    of the package not imported: `seccomp` on a run that takes a kept program)."""
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if type(path) is str:
        return path
    return f"{_PACKAGE}/{name.split('.', 1)[1].replace('.', '/')}.py"


def _code_of(names) -> tuple:
    """(file, identity) of each module of `names` (OSError where one is missing: no piece)."""
    served = _served_stats()
    out = []
    for name in names:
        path = _module_file(name)
        st = served.get(path)
        out.append((path, inode_identity(os.stat(path) if st is None else st)))
    return tuple(out)


def _seccomp_key(inputs: tuple) -> tuple:
    return ("seccomp", inputs, sys.version, sys.executable, _PACKAGE, os.uname().machine, _code_of(SECCOMP_CODE))


class Pieces:
    """The parts of a build kept by earlier runs (see above), asked by the compilers through
    `protections.Job.pieces`; what was built here instead is written with the run's entry
    (`Miss.store`). A piece that is missing, damaged, foreign or of other inputs is built anew:
    never an error.

    Two states, each a slot of its own (at most one set): `_missing`, the piece `seccomp` looked
    for and did not find — (path, key), what `seccomp_built` may fill; then `_to_write`, what
    `store` writes — (path, entry key, body). Taking a kept piece, or building one that does not
    match, sets neither."""

    __slots__ = ("_missing", "_to_write", "code")

    def __init__(self):
        self._missing = None
        self._to_write = None
        # (file, identity) of the code that made a kept program this run took (its key's): that code
        # is not imported here, yet the run's plan entry must name it (`plan_keep.Miss.built`), or
        # an edit of `seccomp.py` never reached that entry's hits
        self.code = ()

    def seccomp(self, inputs: tuple):
        """The `protections.Compiled` of the seccomp program kept for `inputs`
        (`protections.seccomp_inputs`), ready for this process, or None (build it, then
        `seccomp_built`)."""
        self._missing = self._to_write = None
        try:
            key = _seccomp_key(inputs)
            path = os.path.join(pieces_dir(), "seccomp-" + _imp.source_hash(_PIECE_NAME_KEY, marshal.dumps(key, 2)).hex()
                                + ".piece")
            data = _open_entry(path)
            if data is not None:
                form, stored, body = marshal.loads(data)
                if form == PIECE_FORMAT and stored == key:
                    kept = _seccomp_ready(*marshal.loads(body))
                    if kept is not None:
                        self.code = _code_of(SECCOMP_CODE)  # (as in the key: 2 stats, the rest served)
                        return kept
            self._missing = (path, key)
        except Exception:
            pass
        return None

    def seccomp_built(self, inputs: tuple, compiled) -> None:
        """`compiled` was built here for `inputs`, which `seccomp` found no piece for: keep it
        (written by `store`, once the run has ended)."""
        if self._missing is None:
            return
        (path, key), self._missing = self._missing, None
        bpf, steps = compiled.outputs["bpf"], compiled.steps
        # the one step, pointing at this process's program: kept without its address (`_seccomp_ready`)
        if len(steps) != 1 or steps[0][1][0] != _libc.SYS_SECCOMP or steps[0][1][4] != _libc.sock_fprog(bpf)[1]:
            return
        self._to_write = (path, (PIECE_FORMAT, key), (bpf, steps[0][0], steps[0][1][:4], compiled.enforced,
                                                       tuple(compiled.degraded), tuple(compiled.warnings)))

    def store(self) -> None:
        if self._to_write is not None:
            store(self._to_write)
        self._missing = self._to_write = None


def _seccomp_ready(bpf, label, call, enforced, degraded, warnings):
    """A kept seccomp piece as the compiler's `Compiled`, its step pointing at this process's copy
    of the program."""
    from sandboy.confine.protections import Compiled  # (the build's own: imported already)

    if type(bpf) is not bytes or not bpf or len(bpf) % 8 or type(call) is not tuple or call[0] != _libc.SYS_SECCOMP:
        return None
    keepalive, fprog = _libc.sock_fprog(bpf)
    return Compiled("seccomp", [(label, (*call, fprog))], enforced, degraded, warnings, bpf=bpf, keepalive=keepalive)
