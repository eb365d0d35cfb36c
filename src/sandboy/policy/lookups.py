"""What a policy's presets asked of this machine, recorded, and asked again (ADR 0028, session 12).

The presets (`include = ["system", "python"]`: policy/presets.py) are resolved at every load from
the machine's answers: which paths exist, which PATH entries hold an executable `python3`, where
a program's symlinks lead, a venv's `pyvenv.cfg`, the working directory, the interpreter's
prefixes and two environment variables. The presets ask every such question through `ask` and
nothing else, so their rules are a function of the answers alone: where every recorded question
gets the same answer again, a load now would add exactly the rules the recorded load added. A
plan cache hit asks them again (`unchanged`) without importing the presets, the policy loader or
`tomllib`; one answer that differs is a miss, and the rebuild resolves the presets anew.

What is kept (`recorded`) holds the questions (a kind and a path or a name) and the answers as
the presets used them, except where the answer is a value of the operator's environment or
a file's contents — those are kept as a keyed digest (`_digest`), never as written: an entry sits
in `~/.cache` (ADR 0028's rule). The paths asked about are written as they are, as the plan's
own rules (and the fingerprint's PATH watch) write paths.
"""

import _imp
import os
import sys

_DIGEST_KEY = 0x53424F594C4F4F4B  # "SBOYLOOK": the keyed SipHash of a digested answer


def _program(path: str) -> bool:
    """What `presets.which_all` takes from PATH: an executable regular file (for these ids)."""
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _readlink(path: str):
    return os.readlink(path)


def _cwd(_: str) -> str:
    return os.getcwd()


def _environment(name: str):
    return os.environ.get(name)


def _interpreter(name: str):
    """`sys.executable`, `sys.prefix`, `sys.base_prefix`: fixed at the interpreter's start (the
    executable, `pyvenv.cfg` beside it, PYTHONHOME); asked again as values."""
    return getattr(sys, name)


def _venv_home(venv: str):
    """The base interpreter's bin directory from a venv's pyvenv.cfg (`home = ...`), or None."""
    try:
        with open(os.path.join(venv, "pyvenv.cfg"), encoding="utf-8") as fh:
            for line in fh:
                key, _, value = line.partition("=")
                if key.strip() == "home":
                    return value.strip()
    except (OSError, UnicodeDecodeError):
        return None
    return None


# kind -> the question (one argument: a path, or a name). Every answer is a function of the
# machine's state and this process's ids, cwd, environment and interpreter, nothing else.
QUESTIONS = {
    "exists": os.path.exists,
    "isdir": os.path.isdir,
    "isfile": os.path.isfile,
    "program": _program,
    "islink": os.path.islink,
    "readlink": _readlink,
    "realpath": os.path.realpath,
    "cwd": _cwd,
    "env": _environment,
    "sys": _interpreter,
    "venv_home": _venv_home,
}
# answers kept as a digest: an environment value, a file's contents (module docstring)
_DIGESTED = frozenset(("env", "venv_home"))

_answers: dict = {}  # (kind, argument) -> the answer as kept (see `_kept`), in the order asked
_unsure = False  # a question that raised, or got two answers in this process: nothing can be kept


def _digest(value) -> bytes | None:
    if value is None:
        return None
    return _imp.source_hash(_DIGEST_KEY, os.fsencode(value))


def _kept(kind: str, answer):
    return _digest(answer) if kind in _DIGESTED else answer


def ask(kind: str, argument: str):
    """The answer to the question `kind` about `argument`, recorded (the presets' only way to
    look at the machine)."""
    global _unsure
    try:
        answer = QUESTIONS[kind](argument)
    except BaseException:
        _unsure = True  # (the load fails, or goes on without it: either way nothing to keep)
        raise
    kept = _kept(kind, answer)
    if _answers.setdefault((kind, argument), kept) != kept:
        _unsure = True  # asked twice, answered differently: the rules mix both answers
    return answer


def real_path(path: str) -> str:
    """`os.path.realpath(path)` for an absolute `path`, walked as CPython's posixpath does
    (non-strict: a component that cannot be lstat'ed is not a link; a symlink loop ends the walk)
    with each component's lstat and each link's target asked through `ask` (`islink`,
    `readlink`): the answer is then a function of those recorded answers, and a hit asks one
    lstat per distinct component of all the walks — where asking `realpath` again walked every
    path whole in Python (≈ 20 µs to 0.1 ms each; a project's `.venv` asks ≈ 20). A relative
    `path` is asked as a whole (`realpath`: its walk starts at the working directory)."""
    if not path.startswith("/"):
        return ask("realpath", path)
    return os.path.normpath(_walk("", path, {})[0])  # (posixpath.realpath's abspath, of an absolute path)


def _walk(path: str, rest: str, seen: dict) -> tuple:
    """posixpath._joinrealpath (CPython 3.11), non-strict, for str: (the path resolved, whether
    no symlink loop ended it)."""
    join, split = os.path.join, os.path.split
    if rest.startswith("/"):
        rest, path = rest[1:], "/"
    while rest:
        name, _, rest = rest.partition("/")
        if not name or name == ".":
            continue
        if name == "..":
            if path:
                path, name = split(path)
                if name == "..":
                    path = join(path, "..", "..")
            else:
                path = ".."
            continue
        newpath = join(path, name)
        if not ask("islink", newpath):
            path = newpath
            continue
        if newpath in seen:  # a link met again: resolved already, or a loop
            path = seen[newpath]
            if path is not None:
                continue
            return join(newpath, rest), False
        seen[newpath] = None
        path, ok = _walk(path, ask("readlink", newpath), seen)
        if not ok:
            return join(path, rest), False
        seen[newpath] = path
    return path, True


def unsure() -> None:
    """A caller looked at something `ask` does not record (an environment that is not this
    process's `os.environ`): what this process loaded cannot be asked again."""
    global _unsure
    _unsure = True


def recorded():
    """Every question asked in this process with its answer (as kept), as plain values `marshal`
    can write — or None where they cannot be asked again (`unsure`). Empty: none asked."""
    if _unsure:
        return None
    return tuple((kind, argument, answer) for (kind, argument), answer in _answers.items())


def without_implied(record, present) -> tuple:
    """`record` less each `exists` answered True for a path in `present` (`Fingerprint.present`:
    the policy paths a plan cache hit stats before it asks these questions, which fails unless
    each still exists): the same question asked twice by every hit (≈ 30 of a presets policy's
    ≈ 100 here, each a system call)."""
    return tuple(question for question in record
                 if not (question[0] == "exists" and question[2] is True and question[1] in present))


def unchanged(record) -> bool:
    """Whether every question of `record` (`recorded()` of an earlier process) gets the same
    answer now. Anything unexpected (a kind not known, a question that raises): False."""
    questions = QUESTIONS
    try:
        for kind, argument, answer in record:
            now = questions[kind](argument)
            if (_digest(now) if kind in _DIGESTED else now) != answer:
                return False
    except Exception:
        return False
    return True
