"""The one supervision object (sandboy.confine.supervision): hooks, their order, and that stop
hooks run on every path — with real confined commands, checked from the host side.

An in-process `Supervision` makes its process a child subreaper and sweeps every descendant
at the end, so each in-process scenario runs in a forked copy of the test process (`in_child`):
the sweep must not reach anything pytest or another fixture started.
"""

import json
import os
import time

import pytest
from prockit import named
from supervisedkit import SH, named_after, supervised_run, until_up

from sandboy import CageError, Policy
from sandboy.confine.cage import build
from sandboy.confine.launch import DirectChild, spawn
from sandboy.confine.exec_mode import hooks_for, supervisor_needed
from sandboy.confine.supervision import Handle, Hook, Supervision
from sandboy.confine.supervisor import Supervisor


def _policy(tmp_path, **sections) -> Policy:
    return Policy.from_mapping({"version": 1, "fs": {"read": ["/usr", "/etc/ld.so.cache"], "exec": ["/usr/bin"],
                                                     "write": [str(tmp_path)]}, **sections}, "<test>")


def _read_only(policy: Policy) -> Policy:
    return policy.replace(fs=policy.fs.replace(write=()))


def in_child(scenario):
    """Run `scenario()` in a forked copy of this process; its JSON-able return value, or the
    exception's text as {"raised": ...}."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(r)
            try:
                out = scenario()
            except Exception as exc:  # noqa: BLE001 - reported to the parent
                out = {"raised": f"{type(exc).__name__}: {exc}"}
            os.write(w, json.dumps(out).encode())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return json.loads(b"".join(chunks))


class Recorder(Hook):
    """Appends what happens to it to `log` (a list in this process) and, with `path`, to a file
    (hooks of a forked supervisor run in another process)."""

    def __init__(self, name, log, path=None, fail_in=None, steps=()):
        self.name, self.log, self.path, self.fail_in, self.steps = name, log, path, fail_in, steps

    def _note(self, event):
        self.log.append(f"{self.name}.{event}")
        if self.path is not None:
            with open(self.path, "a") as fh:
                fh.write(f"{self.name}.{event}\n")
        if self.fail_in == event:
            raise RuntimeError(f"{self.name} refuses in {event}")

    def start(self, run):
        self._note("start")
        return self.steps

    def started(self, run):
        self._note("started")

    def stop(self, run, result):
        self.log.append(f"{self.name}.saw:{result.outcome}:{result.returncode}")
        if self.path is not None:
            with open(self.path, "a") as fh:
                fh.write(f"{self.name}.saw:{result.outcome}:{result.returncode}\n")
        self._note("stop")


class TreeChecker(Hook):
    """A stop hook that looks, from the host, for the process the command left in the background."""

    name = "tree"

    def __init__(self, marker, log):
        self.marker, self.log = marker, log

    def started(self, run):
        deadline = time.monotonic() + 20
        while not named(self.marker):
            assert time.monotonic() < deadline, f"{self.marker} never ran"
            time.sleep(0.01)
        self.log.append("running")

    def stop(self, run, result):
        self.log.append(f"orphans-left:{len(named(self.marker))}")


def _supervised(tmp_path, argv, hooks, timeout=None, after_start=None, **sections):
    """In a forked child: Supervision(...).start(), optional `after_start(run)`, wait(); the
    events and the result."""

    def scenario():
        log = []
        hook_objs = hooks(log)
        cage = build(_policy(tmp_path, **sections), cwd=str(tmp_path))
        try:
            run = Supervision(argv, cage, timeout=timeout, hooks=hook_objs)
            try:
                run.start()
            except CageError as exc:
                log.append(f"refused:{exc}")
            else:
                if after_start is not None:
                    after_start(run)
            result = run.wait()
        finally:
            cage.close()
        return {"log": log, "outcome": result.outcome, "returncode": result.returncode, "error": result.error}

    return in_child(scenario)


@pytest.mark.parametrize("tier", [pytest.param("namespaces"), pytest.param("fallback", marks=pytest.mark.without_namespaces)])
def test_hooks_run_in_order_and_stop_after_the_whole_tree_is_gone(tmp_path, tier):
    """Without the namespace tier nothing but the sweep ends the orphan (under it, the PID
    namespace dies with its init): both must leave nothing for the stop hooks to find."""
    marker = f"orphan-{os.getpid()}-{time.monotonic_ns()}"
    # the command leaves an orphan in a new session behind, and exits 0 once it runs
    argv = [SH, "-c", f"/usr/bin/setsid {SH} -c 'exec -a {marker} /usr/bin/sleep 60' & "
                      f"while ! [ -e {tmp_path / 'go'} ]; do /usr/bin/sleep 0.01; done; exit 0"]

    def hooks(log):
        checker = TreeChecker(marker, log)
        go = Recorder("go", [])
        go.started = lambda run: (tmp_path / "go").touch()
        return [Recorder("a", log), Recorder("b", log), checker, go]

    out = _supervised(tmp_path, argv, hooks)
    assert (out["outcome"], out["returncode"]) == ("exited", 0), out
    assert out["log"] == ["a.start", "b.start", "a.started", "b.started", "running",
                          "orphans-left:0",
                          "b.saw:exited:0", "b.stop", "a.saw:exited:0", "a.stop"], out
    assert named(marker) == []


def test_stop_hooks_run_when_the_command_times_out(tmp_path):
    out = _supervised(tmp_path, [SH, "-c", "/usr/bin/sleep 60"], lambda log: [Recorder("a", log)], timeout=0.3,
                      after_start=lambda run: _wait_for_deadline(run))
    assert (out["outcome"], out["returncode"]) == ("timed_out", 137), out
    assert out["log"] == ["a.start", "a.started", "a.saw:timed_out:137", "a.stop"]


def _wait_for_deadline(run):
    while run.time_left() and not run.exited():
        time.sleep(0.02)
    run.end("timed_out")


def test_stop_hooks_run_when_the_command_is_killed(tmp_path):
    out = _supervised(tmp_path, [SH, "-c", "/usr/bin/sleep 60"], lambda log: [Recorder("a", log)],
                      after_start=lambda run: run.kill())
    assert (out["outcome"], out["returncode"]) == ("killed", 137), out
    assert out["log"] == ["a.start", "a.started", "a.saw:killed:137", "a.stop"]


def test_stop_hooks_run_when_the_command_cannot_start(tmp_path):
    out = _supervised(tmp_path, [str(tmp_path / "no-such-command")], lambda log: [Recorder("a", log)])
    assert (out["outcome"], out["returncode"]) == ("not_found", 127), out
    assert out["log"] == ["a.start", "a.started", "a.saw:not_found:127", "a.stop"]


def test_a_hooks_child_steps_run_first_and_a_failing_one_is_a_cage_error(tmp_path):
    from sandboy.confine import _libc

    missing = tmp_path / "gone"
    step = ("the hook's own step", (_libc.SYS_CHDIR, False, os.fsencode(missing) + b"\0"))
    marker = tmp_path / "ran"
    out = _supervised(tmp_path, [SH, "-c", f"/usr/bin/touch {marker}"],
                      lambda log: [Recorder("a", log, steps=(step,))])
    assert (out["outcome"], out["returncode"]) == ("cage_error", 125), out
    assert "the hook's own step" in out["error"]
    assert not marker.exists()
    assert out["log"] == ["a.start", "a.started", "a.saw:cage_error:125", "a.stop"]


def test_a_failing_start_hook_refuses_with_125_and_starts_nothing(tmp_path):
    marker = tmp_path / "ran"
    out = _supervised(tmp_path, [SH, "-c", f"/usr/bin/touch {marker}"],
                      lambda log: [Recorder("a", log), Recorder("b", log, fail_in="start"), Recorder("c", log)])
    assert (out["outcome"], out["returncode"]) == ("cage_error", 125), out
    assert out["error"] == "b: b refuses in start"
    assert not marker.exists()
    # c never started; a, whose start returned, is stopped; b cleans up after itself
    assert out["log"] == ["a.start", "b.start", "a.saw:cage_error:125", "a.stop", "refused:b: b refuses in start"]


def test_a_failing_started_hook_kills_the_tree_and_refuses_with_125(tmp_path):
    marker = f"refused-{os.getpid()}-{time.monotonic_ns()}"

    def hooks(log):
        running = TreeChecker(marker, [])  # its started() waits until the command runs
        return [Recorder("a", log), running, Recorder("b", log, fail_in="started")]

    out = _supervised(tmp_path, [SH, "-c", f"exec -a {marker} /usr/bin/sleep 60"], hooks)
    assert (out["outcome"], out["returncode"]) == ("cage_error", 125), out
    assert out["log"][:4] == ["a.start", "b.start", "a.started", "b.started"]
    # both stop hooks saw the refusal, b first, before start() raised it
    assert out["log"][4:] == ["b.saw:cage_error:125", "b.stop", "a.saw:cage_error:125", "a.stop",
                              "refused:b: b refuses in started"]
    assert named(marker) == []


def test_a_failing_stop_hook_fails_the_run_closed_and_the_others_still_stop(tmp_path):
    out = _supervised(tmp_path, [SH, "-c", "exit 0"],
                      lambda log: [Recorder("a", log), Recorder("b", log, fail_in="stop")])
    assert (out["outcome"], out["returncode"]) == ("cage_error", 125), out
    assert out["error"] == "b: b refuses in stop"
    assert out["log"] == ["a.start", "b.start", "a.started", "b.started", "b.saw:exited:0", "b.stop",
                          "a.saw:cage_error:125", "a.stop"]


def test_a_pids_refusal_happens_before_any_hook(tmp_path):
    """A closed cage (or a pids group that cannot be made) refuses before any hook starts."""

    def scenario():
        log = []
        cage = build(_policy(tmp_path), cwd=str(tmp_path))
        cage.close()
        run = Supervision([SH, "-c", "exit 0"], cage, hooks=[Recorder("a", log)])
        with pytest.raises(CageError, match="closed"):
            run.start()
        return {"log": log, "outcome": run.wait().outcome}

    assert in_child(scenario) == {"log": [], "outcome": "cage_error"}


def test_a_start_that_raises_still_stops_the_hooks(tmp_path):
    """An argv the child cannot take (a NUL byte) raises ValueError as before; the hooks that
    started are stopped first and no fd is left open."""

    def scenario():
        log = []
        cage = build(_policy(tmp_path), cwd=str(tmp_path))
        try:
            before = set(os.listdir("/proc/self/fd"))
            run = Supervision([SH, "-c", "exit 0\0"], cage, hooks=[Recorder("a", log)])
            with pytest.raises(ValueError):
                run.start()
            leaked = set(os.listdir("/proc/self/fd")) - before
            return {"log": log, "outcome": run.wait().outcome, "leaked": sorted(leaked)}
        finally:
            cage.close()

    assert in_child(scenario) == {"log": ["a.start", "a.saw:cage_error:125", "a.stop"], "outcome": "cage_error",
                                  "leaked": []}


# --- the same hooks through the API's forked supervisor -----------------------------------------


def test_the_api_supervisor_runs_the_callers_hooks_in_order_on_timeout(tmp_path):
    events = tmp_path / "events"
    hooks = [Recorder("a", [], str(events)), Recorder("b", [], str(events))]
    result = spawn([SH, "-c", "/usr/bin/sleep 60"], _policy(tmp_path), cwd=str(tmp_path), timeout=0.3,
                   hooks=hooks).wait()
    assert (result.outcome, result.returncode) == ("timed_out", 137), result
    assert events.read_text().split() == ["a.start", "b.start", "a.started", "b.started",
                                          "b.saw:timed_out:137", "b.stop", "a.saw:timed_out:137", "a.stop"]


def test_the_api_supervisor_refuses_on_a_failing_start_hook_and_starts_nothing(tmp_path):
    events, marker = tmp_path / "events", tmp_path / "ran"
    hooks = [Recorder("a", [], str(events)), Recorder("b", [], str(events), fail_in="start")]
    result = spawn([SH, "-c", f"/usr/bin/touch {marker}"], _policy(tmp_path), cwd=str(tmp_path), hooks=hooks).wait()
    assert (result.outcome, result.returncode, result.error) == ("cage_error", 125, "b: b refuses in start")
    assert not marker.exists()
    assert events.read_text().split() == ["a.start", "b.start", "a.saw:cage_error:125", "a.stop"]


def test_the_api_supervisor_runs_stop_hooks_when_killed(tmp_path):
    events = tmp_path / "events"
    proc = spawn([SH, "-c", f"echo up > {tmp_path / 'up'}; exec /usr/bin/sleep 60"], _policy(tmp_path),
                 cwd=str(tmp_path), hooks=[Recorder("a", [], str(events))])
    deadline = time.monotonic() + 20
    while not (tmp_path / "up").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.kill()
    result = proc.wait()
    assert (result.outcome, result.returncode) == ("killed", 137), result
    assert events.read_text().split() == ["a.start", "a.started", "a.saw:killed:137", "a.stop"]


def test_the_api_supervisor_killed_right_after_spawn_still_ends_and_reports_the_tree(tmp_path):
    """kill() before the supervisor has its SIGTERM handler (it is born with SIGTERM blocked)
    and a burst of SIGTERMs while it ends the tree: each run is reported "killed" — never "the
    sandboy supervisor died" — and leaves no process behind."""
    import signal

    marker = f"burst-{os.getpid()}-{time.monotonic_ns()}"
    for burst in (1, 50):
        proc = spawn([SH, "-c", f"exec -a {marker} /usr/bin/sleep 60"], _policy(tmp_path), cwd=str(tmp_path),
                     supervise=True, **_no_terminal())
        for _ in range(burst):
            try:
                os.kill(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                break
        result = proc.wait()
        assert (result.outcome, result.returncode) == ("killed", 137), (burst, result)
        assert named(marker) == []


# --- one handle interface ------------------------------------------------------------------


def test_every_handle_has_pid_kill_and_wait(tmp_path):
    """A direct child, a forked supervisor and an in-process supervision: the same three names;
    kill() ends a command that would sleep for a minute."""
    policy = _policy(tmp_path)
    argv = [SH, "-c", "exec /usr/bin/sleep 60"]
    direct = spawn(argv, policy, cwd=str(tmp_path), supervise=False)
    supervisor = spawn(argv, policy, cwd=str(tmp_path), supervise=True)
    assert isinstance(direct, DirectChild) and isinstance(supervisor, Supervisor)
    outcomes = {}
    for name, handle in (("direct", direct), ("supervisor", supervisor)):
        assert isinstance(handle, Handle) and handle.pid > 0
        handle.kill()
        result = handle.wait()
        outcomes[name] = (result.outcome, result.returncode)
        assert handle.wait() is result

    def scenario():
        cage = build(policy, cwd=str(tmp_path))
        try:
            run = Supervision(argv, cage).start()
            assert isinstance(run, Handle) and run.pid > 0
            run.kill()
            result = run.wait()
            return [result.outcome, result.returncode]
        finally:
            cage.close()

    assert outcomes == {"direct": ("signaled", 137), "supervisor": ("killed", 137)}
    assert in_child(scenario) == ["killed", 137]


# --- one decision: who needs a supervisor ------------------------------------------------------


class AroundOnly(Recorder):
    """A hook that acts only before and after the run (as the git check does)."""

    during_run = False


def test_every_run_hook_is_a_reason_to_supervise(tmp_path):
    """`exec_mode.hooks_for` and `exec_mode.supervisor_needed` name the same runs: a hook that
    works while the command runs needs a supervisor; one that acts only before and after needs
    one only where no PID namespace makes the init's end the end of the tree."""
    # writing nowhere: every write root but {tmp} gets the post-run git check (ADR 0019)
    plain = build(_read_only(_policy(tmp_path)), cwd=str(tmp_path))
    egress = build(_read_only(_policy(tmp_path, net={"domains": ["example.test"]})), cwd=str(tmp_path))
    r, w = os.pipe()
    try:
        assert hooks_for(plain) == [] and supervisor_needed(plain, stdio=(r, w, w), hooks=[]) is None
        egress_hooks = hooks_for(egress)
        assert [h.name for h in egress_hooks] == ["egress proxy"]
        assert supervisor_needed(egress, stdio=(r, w, w), hooks=egress_hooks) is not None
        assert supervisor_needed(plain, stdio=(r, w, w), hooks=[Hook()]) is not None
        around = supervisor_needed(plain, stdio=(r, w, w), hooks=[AroundOnly("a", [])])
        assert (around is None) == (plain.tier is not None), around
    finally:
        os.close(r)
        os.close(w)
        plain.close()
        egress.close()
    with pytest.raises(ValueError, match="needs a supervisor"):
        spawn([SH, "-c", "exit 0"], _policy(tmp_path), cwd=str(tmp_path), supervise=False, hooks=[Hook()])


def _no_terminal() -> dict:
    """stdio for a command without a terminal (a pytest run from one would otherwise be relayed)."""
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    _opened.append(null)
    return {"stdin": null, "stdout": null, "stderr": null}


_opened: list = []


@pytest.fixture(autouse=True)
def _close_opened():
    yield
    while _opened:
        os.close(_opened.pop())


@pytest.mark.parametrize("tier", [pytest.param("namespaces"), pytest.param("fallback", marks=pytest.mark.without_namespaces)])
def test_a_before_and_after_hook_runs_around_a_direct_child_only_under_the_tier(tmp_path, tier):
    """Under the tier the API starts the command as a direct child (the PID namespace's init)
    and runs such a hook around it; without the tier the same run gets a supervisor."""
    events = tmp_path / "events"
    proc = spawn([SH, "-c", "exit 3"], _policy(tmp_path), cwd=str(tmp_path),
                 **_no_terminal(), hooks=[AroundOnly("a", [], str(events))])
    cage = build(_policy(tmp_path), cwd=str(tmp_path))
    try:
        expected = DirectChild if cage.tier is not None else Supervisor
    finally:
        cage.close()
    assert isinstance(proc, expected), (tier, proc)
    result = proc.wait()
    assert (result.outcome, result.returncode) == ("exited", 3), result
    assert events.read_text().split() == ["a.start", "a.started", "a.saw:exited:3", "a.stop"]


def test_a_before_and_after_hook_that_fails_the_run_fails_a_direct_child_closed(tmp_path):
    events = tmp_path / "events"
    result = spawn([SH, "-c", "exit 0"], _policy(tmp_path), cwd=str(tmp_path), supervise=None,
                   **_no_terminal(), hooks=[AroundOnly("a", [], str(events), fail_in="stop")]).wait()
    assert (result.outcome, result.returncode, result.error) == ("cage_error", 125, "a: a refuses in stop")


# --- a direct child: the same start, refusal and finish path as a Supervision, unsupervised ---------


def _direct(tmp_path, argv, hooks):
    """DirectChild(...).start() on a cage it owns: (the handle or the exception raised, the cage)."""
    cage = build(_policy(tmp_path), cwd=str(tmp_path))
    null = _no_terminal()["stdin"]
    try:
        return DirectChild(argv, cage, True, (null, null, null), hooks).start(), cage
    except Exception as exc:  # noqa: BLE001 - the caller asserts on it
        return exc, cage


def test_a_direct_child_refused_by_a_start_hook_starts_nothing_and_closes_its_cage(tmp_path):
    log, marker = [], tmp_path / "ran"
    got, cage = _direct(tmp_path, [SH, "-c", f"/usr/bin/touch {marker}"],
                        [Recorder("a", log), Recorder("b", log, fail_in="start"), Recorder("c", log)])
    assert isinstance(got, CageError) and str(got) == "b: b refuses in start"
    assert log == ["a.start", "b.start", "a.saw:cage_error:125", "a.stop"]
    assert not marker.exists() and cage.closed


def test_a_direct_child_whose_started_hook_fails_is_killed_refused_and_its_cage_closed(tmp_path):
    log, marker = [], f"direct-refused-{os.getpid()}-{time.monotonic_ns()}"
    got, cage = _direct(tmp_path, [SH, "-c", f"exec -a {marker} /usr/bin/sleep 60"],
                        [Recorder("a", log), TreeChecker(marker, []), Recorder("b", log, fail_in="started")])
    assert isinstance(got, CageError) and str(got) == "b: b refuses in started"
    # the command was SIGKILLed (not a cage error of its own): both stop hooks saw the refusal
    assert log == ["a.start", "b.start", "a.started", "b.started", "b.saw:cage_error:125", "b.stop",
                   "a.saw:cage_error:125", "a.stop"]
    assert named(marker) == [] and cage.closed


def test_a_direct_child_start_that_raises_stops_the_hooks_closes_its_cage_and_leaks_no_fd(tmp_path):
    log = []
    before = set(os.listdir("/proc/self/fd"))
    got, cage = _direct(tmp_path, [SH, "-c", "exit 0\0"], [Recorder("a", log)])
    assert isinstance(got, ValueError), got
    assert log == ["a.start", "a.saw:cage_error:125", "a.stop"] and cage.closed
    # the only new fd is _no_terminal's /dev/null (closed by the fixture)
    assert len(set(os.listdir("/proc/self/fd")) - before) == 1


def test_a_direct_child_reports_its_exit_to_the_hooks_then_closes_its_cage(tmp_path):
    log = []
    got, cage = _direct(tmp_path, [SH, "-c", "exit 3"], [AroundOnly("a", log)])
    assert isinstance(got, DirectChild), got
    assert not cage.closed  # while it runs
    result = got.wait()
    assert (result.outcome, result.returncode) == ("exited", 3), result
    assert result.enforced == cage.enforced and got.wait() is result
    assert log == ["a.start", "a.started", "a.saw:exited:3", "a.stop"] and cage.closed


# --- sandboy run supervises in its own process under the tier (supervisor.run_here) ---------------


@pytest.mark.parametrize("tier", [pytest.param("namespaces"), pytest.param("fallback", marks=pytest.mark.without_namespaces)])
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_killed_supervised_cli_run_leaves_nothing(tmp_path, tier, how):
    """`sandboy run` with a deadline is supervised: by itself under the tier (no supervisor
    process), by a forked supervisor without it. Killed either way, it leaves no process of the
    run behind (an orphan in a session of its own included), and a SIGTERM still ends it as
    SIGTERM ends a process."""
    import signal

    marker = f"cli-killed-{how}-{os.getpid()}-{time.monotonic_ns()}"
    up = tmp_path / "up"
    script = (f"/usr/bin/setsid {SH} -c 'exec -a {marker} /usr/bin/sleep 300' & "
              f"echo > {up}; exec /usr/bin/sleep 300")
    with supervised_run(tmp_path, script) as cli:
        until_up(cli, lambda: up.exists() and named(marker))
        cli.send_signal(getattr(signal, how))
        assert cli.wait(30) == -getattr(signal, how)
    assert named_after(marker) == []
