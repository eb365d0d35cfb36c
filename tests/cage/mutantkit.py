"""The mutation checks' runner, written once (tests/cage/test_mutations*.py; docs/threat-model.md,
"Every rule proven necessary").

A mutant is one protection taken out of Sandboy in THIS test process only: attributes of its
modules replaced with pytest's monkeypatch (undone after each mutant), a method recompiled from
its own source without one call (`without_call`), or a forked child that inherits either. Nothing
in production reads a switch. Each check module supplies its mutants, its scenario and a judge
written by hand (independently of the code under test); this module only runs them:

    outcome = run_mutants(mutants, judge, budget_seconds=60)   # JSON-able: may come from a child
    report(outcome, "egress mutants")                           # prints every mutant, asserts

`judge(mutant)` returns None when every check held (the mutant SURVIVED: no check depends on
what it removed) or a short text saying what failed (KILLED). The intact code is judged the same
way before and/or after the mutants, so a kill is the mutant's doing and a mutant leaves nothing
behind that decides the next one. `report` prints each mutant with how it was killed, marks the
kills that came only from the cage refusing to start (exit 125: the mutant broke the cage's own
set-up, so no attack was shown to get through), and fails the test naming every survivor with
the attributes it patched, and every mutant listed as equivalent that was killed after all.
"""

from __future__ import annotations

import ast
import copy
import ctypes
import inspect
import json
import os
import textwrap
import time
import traceback
import types
from typing import Callable, NamedTuple

import pytest

PR_SET_DUMPABLE = 4  # linux/prctl.h, by hand
CLONE_NEWNS, MS_REC, MS_PRIVATE, MS_SHARED = 0x00020000, 0x4000, 1 << 18, 1 << 20  # linux/sched.h, mount.h


class Mutant(NamedTuple):
    label: str
    patches: tuple  # ((owner, attribute, value), ...): set with monkeypatch for this mutant only
    check: Callable | None = None  # the mutant's own probe, where each mutant has one (test_mutations.py)

    def where(self) -> str:
        return ", ".join(f"{getattr(owner, '__name__', owner)}.{attribute}" for owner, attribute, _ in self.patches)


def mutant(label: str, owner, attribute: str, value, check: Callable | None = None) -> Mutant:
    """One attribute replaced: the common case."""
    return Mutant(label, ((owner, attribute, value),), check)


def forget_built_cages() -> None:
    """`sandboy.run` reuses a cage compiled earlier for an equal policy: a mutant must not (nor
    the intact code a mutant's cage)."""
    from sandboy.confine import reuse

    reuse._REUSED.close()


def first_failure(checks, *args) -> str | None:
    """Run `checks` (functions, or (name, function) pairs) in order with `args`: the first that
    fails, named, with the first line of its message; None when all of them pass."""
    for check in checks:
        name, fn = check if isinstance(check, tuple) else (check.__name__, check)
        try:
            fn(*args)
        except AssertionError as exc:
            return failed(name, exc)
    return None


class CageRefused(AssertionError):
    """Raised by a check whose run did not start at all (exit 125) where it expected the command
    to run: the mutant broke the cage's own set-up, so no attack was shown to get through."""


REFUSED = "the cage refused to start: "


def failed(name: str, exc: AssertionError) -> str:
    """One line naming the check and saying why it failed (pytest's explanation of an `assert`
    folded onto the line: it holds the run's result, e.g. a refused cage's exit 125)."""
    return f"{name}: {REFUSED if isinstance(exc, CageRefused) else ''}{' '.join(str(exc).split())[:240] or 'failed'}"


def run_mutants(mutants, judge: Callable, *, budget_seconds: float, intact: Callable | None = None,
                intact_when=("before", "after"), after_each: Callable | None = None) -> dict:
    """Each mutant in turn: its patches set (monkeypatch, this process and its forks), no cage
    reused across the change, `judge(mutant)` -> None (survived) or what failed (killed).
    `intact()` (default: `judge(None)`) judges the unmutated code at `intact_when`; `after_each()`
    runs after each mutant (e.g. to replace a host-side victim a mutant hit).

    Returns a JSON-able dict: {"mutants": [label], "killed": {label: why}, "survivors": [label],
    "where": {label: patched attributes}, "seconds": s}, or {"intact": why} when the intact code
    fails, or {"over budget": label}."""
    started = time.monotonic()
    intact = intact or (lambda: judge(None))
    if "before" in intact_when:
        forget_built_cages()
        failure = intact()
        if failure is not None:
            return {"intact": failure}
    killed, survivors = {}, []
    for one in mutants:
        forget_built_cages()
        with pytest.MonkeyPatch.context() as mp:
            for owner, attribute, value in one.patches:
                mp.setattr(owner, attribute, value)  # raises if the attribute is gone: a stale mutant
            failure = judge(one)
        forget_built_cages()
        if failure is None:
            survivors.append(one.label)
        else:
            killed[one.label] = failure
        if after_each:
            after_each()
        if time.monotonic() - started > budget_seconds:
            return {"over budget": f"after {one.label}"}
    if "after" in intact_when:
        failure = intact()
        if failure is not None:
            return {"intact": f"after the mutants: {failure}"}
    labels = [one.label for one in mutants]
    assert len(set(labels)) == len(labels), f"two mutants share a label: {labels}"
    return {"mutants": labels, "killed": killed, "survivors": survivors,
            "where": {one.label: one.where() for one in mutants}, "seconds": round(time.monotonic() - started, 1)}


def killed_by_refusal(why: str) -> bool:
    """Was the mutant killed only because the cage refused to start (a check raised CageRefused,
    or the failure quotes Sandboy's "cannot apply the cage"), not by an attack getting through?
    Reporting only: such a kill proves the step is needed for the cage to work at all, not that
    its protection is what stops an attack."""
    return REFUSED in why or "cannot apply the cage" in why


def report(outcome: dict, noun: str, equivalent=(), weak_kills=None) -> None:
    """Print every mutant with its fate; fail on an intact failure, the budget, any survivor not
    in `equivalent` (labels), or any label in `equivalent` that was killed. `weak_kills`: more
    {name: predicate(why)} kinds of kill that show a protection is reached rather than an attack
    getting through (the cage refusing to start always is one); marked and counted."""
    assert "intact" not in outcome, f"the intact code fails a check: {outcome['intact']}"
    assert "over budget" not in outcome, outcome
    killed, survivors = outcome["killed"], outcome["survivors"]
    weak = {"the cage refusing to start": killed_by_refusal, **(weak_kills or {})}
    kind = {label: next((name for name, is_kind in weak.items() if is_kind(why)), None) for label, why in killed.items()}
    for label in outcome["mutants"]:
        if label in killed:
            how = f"killed ({kind[label]})" if kind[label] else "killed"
            print(f"{label:60} {how} by {killed[label][:200]}")
        else:
            print(f"{label:60} SURVIVED{' (equivalent)' if label in equivalent else ''}")
    expected = set(equivalent) & set(outcome["mutants"])
    unexpected = [f"{label} ({outcome['where'][label]})" for label in survivors if label not in expected]
    stale = sorted(expected - set(survivors))
    counts = ", ".join(f"{sum(k == name for k in kind.values())} only by {name}" for name in weak)
    print(f"{len(killed)} {noun} killed ({counts}), {len(survivors)} survived ({len(expected)} equivalent) "
          f"in {outcome['seconds']} s")
    assert not unexpected and not stale, (f"{noun} no check depends on: {unexpected}; "
                                          f"listed as equivalent but killed: {stale}")


# --- forked children: a mutant inherited by a process that may change identity or mounts -------

def in_child(fn, before=lambda: None):
    """before(), then fn() in a forked child (which never returns into pytest); fn's JSON-able
    result comes back over a pipe, a failure as the child's traceback (an AssertionError here)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            before()
            result = {"result": fn()}
        except BaseException:
            result = {"error": traceback.format_exc()}
        try:  # os._exit runs no atexit: the cages sandboy.run kept here hold {tmp} host directories
            forget_built_cages()
        except BaseException:
            result.setdefault("error", traceback.format_exc())
        data = json.dumps(result).encode()
        while data:
            data = data[os.write(write_end, data):]
        os._exit(0)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    answer = json.loads(b"".join(chunks) or b'{"error": "the child said nothing"}')
    assert "error" not in answer, answer["error"]
    return answer["result"]


def private_mount_namespace() -> None:
    """This (forked) process gets a mount namespace of its own, private recursively before any
    mount, so nothing it mounts reaches the host's (shared) mount table."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0 or libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "a private mount namespace")


def on_a_private_tmpfs(base) -> None:
    """private_mount_namespace(), with a tmpfs on `base`: a bench's many copies are made and
    dropped in memory (on this machine's disk each mkdir and rmdir costs ~3 ms, more than the
    cage runs), and nothing is left to remove."""
    private_mount_namespace()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"tmpfs", os.fsencode(base), b"tmpfs", 0, b"size=64m,mode=0755") != 0:
        raise OSError(ctypes.get_errno(), "a private tmpfs")


def drop_to(uid: int) -> None:
    """This (forked) process becomes `uid` and its gid, with no supplementary groups and, as a
    root process changing all its uids to another, no capabilities left (capabilities(7)). The
    uid change made it undumpable (its /proc/self would belong to root): a process an ordinary
    user starts is dumpable, so it is made so again."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE)")


# --- mutants made from source: one call taken out of one method ------------------------------

def _is_call(node, call) -> bool:
    attr, receivers = call
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attr
            and isinstance(node.func.value, ast.Name) and node.func.value.id in receivers)


class _DropCall(ast.NodeTransformer):
    """Replaces the `index`-th call `<receiver>.<attr>(...)` (in source order) with `None`."""

    def __init__(self, index: int, call):
        self.index, self.call, self.seen = index, call, -1

    def visit_Call(self, node):
        self.generic_visit(node)
        if _is_call(node, self.call):
            self.seen += 1
            if self.seen == self.index:
                return ast.copy_location(ast.Constant(None), node)
        return node


def call_sites(owners, call) -> list:
    """(owner class, method name, index of the call in it, line) for every `call` — an
    (attribute, receiver names) pair such as ("add", ("self", "check")) — in the methods of `owners`."""
    sites = []
    for owner in owners:
        for name, method in vars(owner).items():
            if not inspect.isfunction(method):
                continue
            tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
            first = method.__code__.co_firstlineno
            calls = sorted((node for node in ast.walk(tree) if _is_call(node, call)),
                           key=lambda n: (n.lineno, n.col_offset))
            sites += [(owner, name, i, first + node.lineno - 1) for i, node in enumerate(calls)]
    return sites


def without_call(owner, name: str, index: int, module, call):
    """`owner.name` recompiled from its source without its `index`-th `call`, with `module`'s live
    globals (so a scenario's patched bound is seen). Set it with monkeypatch."""
    method = vars(owner)[name]
    tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    # NodeTransformer walks fields in order, so `seen` counts calls as they are written
    mutated = _DropCall(index, call).visit(copy.deepcopy(tree))
    ast.increment_lineno(mutated, method.__code__.co_firstlineno - 1)
    code = compile(ast.fix_missing_locations(mutated), inspect.getsourcefile(method), "exec")
    body = next(c for c in code.co_consts if isinstance(c, types.CodeType) and c.co_name == name)
    function = types.FunctionType(body, vars(module), name, method.__defaults__, method.__closure__)
    function.__kwdefaults__ = method.__kwdefaults__
    return function
