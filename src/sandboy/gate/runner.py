"""Run a gate's steps, each in its own cage, one after the other.

Per step: policy = meet(step policy, ceiling), computed right before the step starts (an earlier
step may have planted a symlink the step policy names); the shell runs with the repository as
working directory; its merged stdout/stderr comes back through one pipe and is streamed line by
line, prefixed with the step name, to the console, the step's log file and a bounded tail kept
for the reports (`gate.capture`, which also caps them). The gate supervises each step itself,
through the one supervision object (`sandboy.confine.supervision.Supervision`: hooks such as the
egress proxy and the post-run git check, the deadline, killing and reaping the tree); this
module watches it.
"""

from __future__ import annotations

import contextlib
import os
import select
import time

from sandboy.confine.result import (
    EXITED,
    KILLED,
    NOT_EXECUTABLE,
    NOT_FOUND,
    OUT_OF_MEMORY,
    PLANTED,
    SIGNALED,
    TIMED_OUT,
)
from sandboy.errors import EXIT_CAGE, EXIT_INTERRUPTED, EXIT_USAGE, CageError, PolicyError
from sandboy.gate.capture import DEFAULT_MAX_STEP_OUTPUT, GATE_OUTPUT_FACTOR, STEP_OUTPUT_FLOOR, StepOutput
from sandboy.gate.status import Status
from sandboy.policy.meet import meet
from sandboy.policy.resolve import Context, policy_dir, resolve



def _from_run(name: str, default):
    """A StepResult field that is its RunResult's (`default` while no command ran): read, never copied."""
    return property(lambda self: default if self.run_result is None else getattr(self.run_result, name),
                    doc=f"RunResult.{name} of the step's command ({default!r} when none ran)")


class StepResult:
    """One step as it ended: the gate's view (status, narrowings, effective policy, output) around
    the cage's own `RunResult` (`run_result`; None when the step never started a command). Exit code,
    signal, error and what was enforced are read from the RunResult, never copied."""

    __slots__ = ("name", "run", "policy_ref", "allow_failure", "timeout", "status", "run_result", "_error",
                 "duration", "narrowings", "policy", "log_path", "tail", "index", "output_bytes", "output_dropped",
                 "cut_by")

    def __init__(self, step, index: int):
        self.name = step.name
        self.run = step.run  # the step's shell command line
        self.policy_ref = step.policy_ref
        self.allow_failure = step.allow_failure
        self.timeout = step.timeout
        self.index = index
        self.status = Status.NOT_RUN
        self.run_result = None  # sandboy.confine.result.RunResult, once a command ran
        self._error = None      # why the step could not start (policy or cage error)
        self.duration = 0.0
        self.narrowings = []
        self.policy = None
        self.log_path = None
        self.tail = b""
        self.output_bytes = 0    # what the step wrote
        self.output_dropped = 0  # of that, neither logged nor shown (over --max-step-output)
        self.cut_by = None       # timed out because the gate's time budget was spent: why, in words

    def refuse(self, status: str, error: str) -> None:
        """The step never ran a command: a policy error (exit 2) or a cage error (exit 125)."""
        self.status, self._error = status, error

    @property
    def returncode(self):
        if self.run_result is not None:
            return self.run_result.returncode
        return EXIT_CAGE if self.status == Status.CAGE_ERROR else None

    @property
    def error(self):
        return self._error if self.run_result is None else self.run_result.error

    signal = _from_run("signal", None)
    enforced = _from_run("enforced", {})
    degraded = _from_run("degraded", ())
    warnings = _from_run("warnings", ())

    @property
    def failed_gate(self) -> bool:
        """Does this step, as it ended, fail the gate? `allow_failure` steps never do."""
        if self.run_result is not None and self.run_result.outcome == PLANTED:
            return True  # not a test's failure to allow: the step left code for the host's git (ADR 0019)
        # a required step the budget left unstarted was never checked: the gate cannot pass
        return not self.allow_failure and self.status in (*Status.FAILING, *Status.REFUSED, Status.OVER_BUDGET)

    def describe(self) -> str:
        """The outcome in words, identical in every report."""
        if self.status == Status.PASSED:
            return "passed"
        if self.status == Status.FAILED:
            return f"failed (exit {self.returncode})" + (f": {self.error}" if self.error else "")
        if self.status == Status.TIMED_OUT and self.cut_by:
            return f"timed out: {self.cut_by} (tree killed, exit {self.returncode})"
        if self.status == Status.TIMED_OUT:
            return f"timed out after {self.timeout or '?'}s (tree killed, exit {self.returncode})"
        if self.status == Status.KILLED and self.run_result.outcome == OUT_OF_MEMORY:
            return f"killed (exit {self.returncode}): {self.error}"
        if self.status == Status.KILLED:
            return f"killed by signal {self.signal} (exit {self.returncode})"
        if self.status == Status.CAGE_ERROR:
            return f"cage error (exit {EXIT_CAGE}): {self.error}"
        if self.status == Status.POLICY_ERROR:
            return f"policy error: {self.error}"
        if self.status == Status.OVER_BUDGET:
            return f"not run: {self.error}"
        return "not run"


class GateResult:
    def __init__(self, gate, ceiling_source: str, steps: list, started: float, duration: float, budget=None):
        self.gate = gate
        self.budget = budget  # the operator's sandboy.budget.Budget for the whole gate, or None
        self.ceiling_source = ceiling_source
        self.steps = steps
        self.started = started
        self.duration = duration
        self.interrupted = False  # the operator stopped the gate (^C, SIGTERM)

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        if any(s.status == Status.POLICY_ERROR for s in self.steps):
            return EXIT_USAGE
        if any(s.failed_gate and s.status == Status.CAGE_ERROR for s in self.steps):
            return EXIT_CAGE
        return 1 if any(s.failed_gate for s in self.steps) else 0


def log_name(name: str, taken: set) -> str:
    """A file name for a step's log: step names are printable but may hold `/` or `..`."""
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in name).strip(".") or "step"
    candidate, n = safe, 1
    while candidate in taken:
        n += 1
        candidate = f"{safe}-{n}"
    taken.add(candidate)
    return candidate + ".log"


def step_policy(step, ceiling, repo: str, gate_dir: str):
    """(policy, narrowings) for one step; both sides resolved with `.` = `{repo}`."""
    if step.policy is None:
        return ceiling, []
    ctx = Context(cwd=repo, repo=repo, tmp=None, policy_dir=policy_dir(step.policy, gate_dir))
    resolved = resolve(step.policy, ctx)
    return meet(resolved, ceiling)


def resolve_ceiling(ceiling, repo: str):
    return resolve(ceiling, Context(cwd=repo, repo=repo, tmp=None, policy_dir=policy_dir(ceiling, repo)))


class CageCache:
    """One compiled cage per distinct effective policy, reused by every step that has it.

    Compiling a cage costs a few ms per step (the /etc secrets split /etc into ~150 rules), more
    than the target overhead. When a cage may run again is `reuse.Reuse`'s rule (the same one as
    `sandboy.run`'s): the rules a rebuild would give are unchanged (a previous step may have
    changed a policy path, a split directory or a directory a deny glob looked into), and each step starts with an
    empty private `{tmp}` (a tmpfs per step under the namespace tier; elsewhere the directory is
    emptied between steps, when no process of the previous step is alive any more).
    """

    def __init__(self, repo: str):
        from sandboy.confine.reuse import Reuse

        self.repo = repo
        # Steps run one at a time, so a `{tmp}` outside the namespace tier may be emptied
        # between them and its cage reused too.
        self.reuse = Reuse(empty_tmp=True)
        self._pids_group = None  # False once creation failed
        self._memory_cgroups = None  # can this process make memory cgroups? (probed once)
        # where each step's memory group comes from: one group reused while each step leaves it
        # empty (ADR 0027, session 8), as the pids group is joined once per gate
        from sandboy.confine.cgroup import MemoryCgroups

        self.memory_groups = MemoryCgroups()

    def pids_group(self, policy):
        """As root with `limits.processes`: one pids cgroup that this process joins once, so
        steps do not pay a cgroup move each (≈ 10 ms on cgroup v1; see confine/cgroup.py).
        None where none can be made: the step's Supervision then tries a group of its own, and
        refuses the step (125) if that fails too."""
        if self._pids_group:
            # Once joined, every step goes through the group: a step without a process limit
            # must get "max" back, not the previous step's number.
            return self._pids_group
        if not policy.limits.processes or os.geteuid() != 0 or self._pids_group is False:
            return None
        if self._pids_group is None:
            from sandboy.confine.cgroup import PidsCgroup

            group = PidsCgroup.create_and_join(1 << 22)
            self._pids_group = group if group is not None else False
            if group is None:
                return None
        return self._pids_group

    def memory_cgroups(self) -> bool:
        """Can a step's memory be bounded in a cgroup here (ADR 0027)? As root with a writable
        memory controller; probed once per gate with a group made, then kept for the first step."""
        if self._memory_cgroups is None:
            self._memory_cgroups = self.memory_groups.available()
        return self._memory_cgroups

    def memory_plan(self, policy, builtin_default) -> tuple:
        """How a step's `limits.memory_mib` is enforced (ADR 0027): (policy for its cage, MiB for
        its memory cgroup or None, what degraded or None).

        With a memory cgroup the bound is on the step's processes together, and the cage sets no
        RLIMIT_AS. Without one, a value the step or the operator asked for is kept as it meant
        before: RLIMIT_AS per process; the built-in ceiling's own default is not (an address-space
        limit of that size breaks JVMs, Go and V8, which reserve far more than they use), and the
        step runs without a memory bound — said, never silently."""
        mib = policy.limits.memory_mib
        if not mib:
            return policy, None, None
        if self.memory_cgroups():
            return policy.replace(limits=policy.limits.replace(memory_mib=0)), mib, None
        why = ("no memory cgroup can be made here (not root, or /sys/fs/cgroup's memory controller "
               "is not writable)")
        if builtin_default and mib == builtin_default:
            return (policy.replace(limits=policy.limits.replace(memory_mib=0)), None,
                    f"limits.memory_mib: the built-in ceiling's {mib} MiB per step is NOT enforced: {why}; "
                    "a step may use all of the host's memory")
        return (policy, None, f"limits.memory_mib: {mib} MiB enforced per process (RLIMIT_AS, address "
                f"space), not on the step's processes together: {why}")

    def get(self, policy, tty=False) -> tuple:
        """(cage, owned): a compiled cage for `spawn`; the caller closes it after the step when
        `owned` (a cage that could not be shared). `tty`: for a step with a terminal (`--tty`),
        whose /dev keeps /dev/tty and the host's pts under the namespace tier."""
        from sandboy.confine.cage import build

        return self.reuse.get((policy, tty), lambda: build(policy, cwd=self.repo, repo=self.repo, tty=tty))

    def close(self, deadline=None) -> list:
        """Close every cage; returns the `{tmp}` directories left behind (see Cage.close)."""
        left = self.reuse.close(deadline)
        self.memory_groups.close()
        if self._pids_group:
            self._pids_group.leave_and_remove()
            self._pids_group = None
        return left


STOP_GRACE_SECONDS = 0.5  # after ^C/SIGTERM, how long the gate waits for the killed step's tree to be reaped


class Interrupted(Exception):
    """The operator stopped the gate while it was preparing a step (no process of it running)."""


class StopRequest:
    """^C and SIGTERM as a flag plus a wake-up byte; an exception only inside `preparing()`.

    An exception raised wherever the signal lands — a second ^C halfway through killing a
    step's tree, say — unwound the gate and left hundreds of the step's processes behind
    (re-parented to init once the gate exited). So while a step runs, the flag is acted on at
    one place: the pump. While a step is being prepared (its policy met, its cage built: a
    glob in a hostile working copy can make that long) no process of it exists, and the flag
    alone was never looked at: `timeout 120 sandboy gate` ran 11 minutes. There the handler
    raises Interrupted, so the gate stops within a second whatever the preparation is doing."""

    def __init__(self):
        self.requested = False
        self._preparing = False
        self.fd, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    @contextlib.contextmanager
    def preparing(self):
        """A section with no process of the step alive: a stop request raises Interrupted."""
        if self.requested:
            raise Interrupted()
        self._preparing = True
        try:
            yield
        finally:
            self._preparing = False

    def install(self) -> None:
        """Take over SIGINT, SIGTERM and SIGHUP for this process (the CLI does; a library caller
        may not). SIGHUP (the terminal or SSH session hung up, a service manager's SendSIGHUP)
        killed the gate by default, and without the namespace tier the running step's background
        processes outlived it (session 9): it stops the gate as ^C does. An ignored SIGHUP
        (`nohup sandboy gate`) stays ignored: the operator asked the gate to outlive the terminal."""
        import _signal as signal  # the C module: `signal` imports enum and wraps what we use

        signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if sig != signal.SIGHUP or signal.getsignal(sig) != signal.SIG_IGN:
                signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        self.requested = True
        if self._preparing:
            self._preparing = False  # once: the unwinding itself is not interrupted again
            raise Interrupted()

    def drain(self) -> None:
        try:
            while os.read(self.fd, 512):
                pass
        except BlockingIOError:
            pass


class GateRun:
    """One run of a gate: what every step shares (the gate, the resolved ceiling, the console,
    where logs go, the compiled cages, the operator's stop request) and the steps' results.

    `run()` runs the steps in order and returns the GateResult; `run_step` runs one."""

    def __init__(self, gate, ceiling, console, log_dir=None, keep_going: bool = False, stop=None,
                 interactive=(), max_output: int = DEFAULT_MAX_STEP_OUTPUT, budget=None):
        self.gate = gate
        # the operator's time budget for all the steps together (a sandboy.budget.Budget), or None
        self.budget = budget
        # bytes of each step's output kept in its log and shown on the console (head and tail)
        self.max_output = max_output
        # what all the steps together may still keep (capture.GATE_OUTPUT_FACTOR)
        self.output_left = GATE_OUTPUT_FACTOR * max_output
        self.ceiling_source = ceiling.source
        self.ceiling = resolve_ceiling(ceiling, gate.repo)
        from sandboy.gate.ceiling import BUILTIN_SOURCE

        # the built-in ceiling's memory bound, which only a memory cgroup enforces (ADR 0027)
        self.builtin_memory = ceiling.limits.memory_mib if ceiling.source == BUILTIN_SOURCE else None
        from sandboy.gate.repository_links import RepositoryLinks

        # the ceiling's grants, looked up before each step without following the repository's links
        self.links = RepositoryLinks(self.ceiling, gate.repo)
        self.console = console
        self.log_dir = log_dir
        self.keep_going = keep_going
        # `stop`: a StopRequest the caller installed (the CLI does), else one never requested
        self.stop = stop if stop is not None else StopRequest()
        # names of steps run with a fresh pseudo-terminal relayed to ours (`--tty STEP`)
        self.interactive = frozenset(interactive)
        self.results = [StepResult(step, i) for i, step in enumerate(gate.steps)]
        self.cages = None  # a CageCache while run() runs
        from sandboy.confine.gitcheck_hook import LaunchRecord

        # where the git directories are, from one step's post-run check to the next step's
        # launch: nothing but the gate runs between two steps, so only the first walks before
        # it starts (ADR 0019, session 6)
        self.git_record = LaunchRecord(reach=self.links.roots)  # every step writes only inside these
        self._null = None  # /dev/null, open while run() runs
        # the steps' egress name lookups: one helper process for the gate (egress/resolver.py)
        self._lookups = None
        if log_dir is not None:
            taken: set = set()
            for result in self.results:
                result.log_path = os.path.join(log_dir, log_name(result.name, taken))

    def run(self) -> GateResult:
        started_wall = time.time()
        started = time.monotonic()
        if self.budget is not None:
            self.budget.start()
        if self.log_dir is not None:
            os.makedirs(self.log_dir, exist_ok=True)
        self.console.gate_start(self.gate, self.ceiling_source)
        self.cages = CageCache(self.gate.repo)
        self._left_behind: list = []
        self._null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)  # every step's stdin
        interrupted = False
        try:
            interrupted = self._run_steps()
        finally:
            os.close(self._null)
            if self._lookups is not None:  # (however the gate ends: its lookups end with it)
                self._lookups.close()
            self._left_behind += self.cages.close(self._cleanup_deadline())
            self.cages = None
        for path in self._left_behind:
            self.console.note(f"stopped before a step's {{tmp}} was removed: remove {path} yourself")
        result = GateResult(self.gate, self.ceiling_source, self.results, started_wall, time.monotonic() - started,
                            self.budget)
        result.interrupted = interrupted
        return result

    def _cleanup_deadline(self):
        """None (remove everything) unless the operator stopped the gate: then what a step left
        in its {tmp} gets half a second, so the gate still ends within a second of ^C/SIGTERM
        (300,000 files took 2 s); what remains is named on the console."""
        return time.monotonic() + 0.5 if self.stop.requested else None

    def _run_steps(self) -> bool:
        """Run the steps in order; True when the operator stopped the gate (^C, SIGTERM)."""
        gate_dir = os.path.dirname(self.gate.path)
        halted = False  # a required step failed and --keep-going is off: the rest are not run
        shown = (None, None)  # the last step's effective policy and its TOML form
        for step, result in zip(self.gate.steps, self.results):
            if self.stop.requested:
                return True
            if self._over_budget(result):  # (also after a step the budget cut: the real reason)
                continue
            if halted:
                continue
            try:
                with self.stop.preparing():
                    ceiling, dropped = self.links.apply()
                    policy, narrowings = step_policy(step, ceiling, self.gate.repo, gate_dir)
                    narrowings = dropped + narrowings
            except Interrupted:
                return True
            except PolicyError as exc:  # e.g. a path the meet cannot resolve; nothing of this step ran
                result.refuse(Status.POLICY_ERROR, str(exc))
                self.console.step_end(result)
                break
            result.narrowings = narrowings
            if self._over_budget(result):  # spent while the step's policy was met
                continue
            if policy is not shown[0]:  # steps without a policy of their own all run the ceiling
                shown = (policy, policy.to_toml_dict())
            result.policy = shown[1]  # one object for them all: the JSON report encodes it once
            self.console.step_start(result, len(self.results))
            try:
                interrupted = self.run_step(step, result, policy)
            except Interrupted:  # while its cage was built: nothing of it ran
                result.refuse(Status.NOT_RUN, "interrupted before it started")
                interrupted = True
            self.console.step_end(result)
            if interrupted:
                return True
            if result.status == Status.POLICY_ERROR:
                break
            if result.failed_gate and not self.keep_going:
                halted = True
        return False

    def _over_budget(self, result: StepResult) -> bool:
        """Whether the gate's time budget is spent: then `result`'s step is not started (the
        console says so once, at the first step it leaves out)."""
        if self.budget is None or not self.budget.exhausted():
            return False
        if not any(r.status == Status.OVER_BUDGET for r in self.results[:result.index]):
            left_out = sum(r.status == Status.NOT_RUN for r in self.results[result.index:])
            self.console.note(f"{self.budget.describe()} is spent: {left_out} step(s) from "
                              f"{result.name} on are not run")
        result.refuse(Status.OVER_BUDGET, self.budget.unstarted())
        return True

    def run_step(self, step, result: StepResult, policy) -> bool:
        """Run one step, filling `result`; True when the operator interrupted the gate."""
        argv = [*self.gate.shell, step.run]
        log_fh = None
        if self.log_dir is not None:
            from sandboy.gate.outputs import open_output

            log_fh = open_output(result.log_path)
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        # the step's output cap; its egress decision log (--logs) is bounded by the same, and
        # both count against what all steps together may keep (session 8 review)
        output_cap = min(self.max_output, max(self.output_left, STEP_OUTPUT_FLOOR))
        stream = StepOutput(self.console, step.name, log_fh, output_cap)
        egress_log = None
        interrupted = False
        owned = False
        cage = None
        relay = None
        by_budget = False  # the step's deadline is what is left of the gate's budget
        own = None  # the step's own deadline: its timeout or the ceiling's wall_seconds, the smaller
        started = time.monotonic()
        try:
            from sandboy.confine.exec_mode import hooks_for
            from sandboy.confine.supervision import Supervision, timeout_for

            try:
                stdio, ctty = (self._null, write_fd, write_fd), None
                if step.name in self.interactive:
                    from sandboy.confine.relay import Relay

                    # The step's terminal output goes where the gate's record goes (stderr
                    # with `--json -`, so the report on stdout stays JSON).
                    try:
                        record_fd = self.console.out.fileno()
                    except (AttributeError, OSError, ValueError):
                        record_fd = 1
                    self.console.out.flush()
                    relay = Relay((None, record_fd, None), tty=True, tee=stream.record)
                    stdio, ctty = relay.stdio, relay.ctty
                cage_policy, memory_mib, memory_degraded = self.cages.memory_plan(policy, self.builtin_memory)
                with self.stop.preparing():
                    cage, owned = self.cages.get(cage_policy, tty=ctty is not None)
                # The gate supervises its steps itself (it is a subreaper): docs/design.md (Gate) says no process
                # of a step outlives it, including ones that called setsid, and a supervisor process
                # per step would cost ≈ 2.5 ms (docs/performance.md).
                # with net.domains and --logs: the proxy's decisions beside the step's output
                egress_log = (os.path.splitext(result.log_path)[0] + ".egress.jsonl"
                              if result.log_path and policy.net.egress else None)
                if egress_log is not None:  # this run's decisions only, as the step's log (truncated):
                    try:  # the proxy appends, so a --logs directory used again grew by a cap a run
                        os.unlink(egress_log)  # (and the output budget was charged the old lines)
                    except FileNotFoundError:
                        pass
                own = timeout_for(cage, step.timeout)
                timeout = step.timeout
                if self._over_budget(result):
                    # spent while the cage was built (a deny glob over a large working copy can
                    # take seconds): the command is not started at all
                    return False
                if self.budget is not None:
                    # the step's own deadline, unless what is left of the gate's budget comes first
                    timeout, by_budget = self.budget.bound(own)
                proc = Supervision(argv, cage, timeout=timeout, stdio=stdio,
                                   pids_group=self.cages.pids_group(policy), ctty=ctty,
                                   hooks=hooks_for(cage, egress_log, self.git_record, output_cap,
                                                   self._name_lookups(policy)),
                                   memory_mib=memory_mib, memory_cgroups=self.cages.memory_groups).start()
            except PolicyError as exc:
                result.refuse(Status.POLICY_ERROR, str(exc))
                return False
            except CageError as exc:
                result.refuse(Status.CAGE_ERROR, str(exc))
                return False
            finally:
                os.close(write_fd)
                if relay is not None:
                    relay.started()
            try:
                if relay is not None:
                    interrupted = self._pump_interactive(proc, relay)
                else:
                    interrupted = self._pump(proc, read_fd, stream)
            except BaseException as unwound:
                # Whatever raised in the output loop — the console (a hung-up terminal's EIO on the
                # status line), the log, a bug — unwound the gate with the step still running, and
                # without the namespace tier its background processes outlived the gate (session 9).
                # The tree ends here first, the stop hooks run (egress proxy, memory group); then it
                # propagates as it was.
                _end_unwound(proc, unwound)
                raise
            outcome = proc.wait()
            if memory_degraded:
                outcome.degraded.append(memory_degraded)
        finally:
            if relay is not None:
                relay.close()
            if owned and not cage.close(self._cleanup_deadline()):
                self._left_behind.append(cage.ctx.tmp)
            os.close(read_fd)
            stream.close()
            if log_fh is not None:
                log_fh.close()
            result.tail = bytes(stream.tail)
            result.output_bytes, result.output_dropped = stream.total, stream.dropped
            self.output_left -= stream.total - stream.dropped
            if egress_log is not None:
                try:
                    self.output_left -= os.lstat(egress_log).st_size
                except OSError:
                    pass  # no client came: no log was written
            result.duration = time.monotonic() - started
        result.run_result = outcome
        result.status = _status(outcome)
        if result.status == Status.TIMED_OUT and by_budget:
            result.cut_by = self.budget.cut()
        elif result.status == Status.TIMED_OUT:
            result.timeout = own
        return interrupted

    def _name_lookups(self, policy):
        """The egress proxy's name-lookup helper, shared by the steps (None: no egress)."""
        if policy.net.egress and self._lookups is None:
            from sandboy.egress.resolver import LookupHelper

            self._lookups = LookupHelper()
        return self._lookups

    def _pump(self, run, read_fd: int, stream: StepOutput) -> bool:
        """Copy the step's output while it runs; end its tree when it exits, times out or the
        operator stops the gate. Runs until BOTH the output is closed and the command has exited:
        a step may close its output and go on running, and its deadline still holds. Returns True
        when the operator stopped the gate (^C, SIGTERM)."""
        poller = select.poll()
        for fd in (read_fd, run.pidfd, self.stop.fd):
            poller.register(fd, select.POLLIN)
        # cgroup v1: the group's OOM killer is off (its tasks wait at the bound) and its OOM event
        # tells the gate to end the tree (v2 kills the group together: memory.oom.group). ADR 0027.
        oom_fd = _oom_event_fd(run)
        if oom_fd is not None:
            poller.register(oom_fd, select.POLLIN)
        watching = {read_fd, run.pidfd}
        while watching:
            for fd, _ in poller.poll(_poll_ms(run)):
                if fd == self.stop.fd:
                    self.stop.drain()
                elif fd == oom_fd:
                    poller.unregister(fd)
                    run.end(OUT_OF_MEMORY)
                elif fd == run.pidfd:
                    # The command exited: end its descendants now, so none holds the pipe open.
                    poller.unregister(fd)
                    watching.discard(fd)
                    run.exited()
                    run.end()
                elif fd == read_fd:
                    chunk = os.read(read_fd, 65536)
                    if chunk:
                        stream.feed(chunk)
                    else:
                        poller.unregister(fd)
                        watching.discard(fd)
            if self.stop.requested and run.pidfd in watching:
                # the tree dies: the pidfd and the pipe report it next — unless the kernel takes long
                # to tear a process down, which the gate then does not wait for (it ends within 1 s)
                run.end(KILLED, deadline=time.monotonic() + STOP_GRACE_SECONDS)
                if run.abandoned:
                    return True
            elif run.time_left() == 0 and run.pidfd in watching:
                run.end(TIMED_OUT)
            self.console.tick()
        return self.stop.requested


    def _pump_interactive(self, run, relay) -> bool:
        """`--tty STEP`: relay the operator's terminal and the step's own pseudo-terminal
        (relay.Relay) until the command exits, times out or the operator stops the gate; then
        hang the pty up and end the tree, as `_pump` does. No live status line: the terminal is the
        step's meanwhile."""
        import signal

        previous = signal.signal(signal.SIGWINCH, relay.update_window_size)
        oom_fd = _oom_event_fd(run)
        try:
            while True:
                poller = select.poll()
                for fd in (run.pidfd, self.stop.fd) + ((oom_fd,) if oom_fd is not None else ()):
                    poller.register(fd, select.POLLIN)
                for fd, events in relay.poll_set():
                    poller.register(fd, events)
                exited = out_of_memory = False
                for fd, events in poller.poll(_poll_ms(run)):
                    if fd == self.stop.fd:
                        self.stop.drain()
                    elif fd == run.pidfd:
                        exited = True
                    elif fd == oom_fd:
                        out_of_memory = True
                    else:
                        relay.service(fd, events)
                if out_of_memory and not exited:
                    run.end(OUT_OF_MEMORY)
                    relay.finish()
                    return self.stop.requested
                if exited:
                    run.exited()
                    relay.finish()  # hung up before the sweep: nothing left can use the pty
                    run.end()
                    return self.stop.requested
                if self.stop.requested or run.time_left() == 0:
                    run.end(KILLED if self.stop.requested else TIMED_OUT)
                    relay.finish()
                    return self.stop.requested
        finally:
            relay.close()
            signal.signal(signal.SIGWINCH, previous)


def _poll_ms(run) -> int:
    """How long a pump may wait for its fds: the console's tick (250 ms), and never past the step's
    deadline (+1 ms: woken before it, the pump would only wait again)."""
    left = run.time_left()
    return 250 if left is None else max(0, min(250, int(left * 1000) + 1))


def _oom_event_fd(run):
    """The fd of the step's memory group's OOM event, which the pumps watch (cgroup v1), or None."""
    return run.memory_group.oom_event_fd if run.memory_group is not None else None


def _end_unwound(run, unwound: BaseException) -> None:
    """End a step's tree (outcome "killed") and reap it while `unwound` unwinds the gate out of its
    pump. `unwound` stays the report: what ending the tree raises is added to it as a note (raised
    from here it replaced `unwound` — an OSError out of end() was printed by the gate's CLI as
    "sandboy gate: : None", the cause lost; session 10); what the reaping raises is dropped."""
    try:
        run.end(KILLED)
    except Exception as exc:
        unwound.add_note(f"then ending the step's tree failed too: {type(exc).__name__}: {exc}")
    finally:
        with contextlib.suppress(Exception):
            run.wait()


def _status(outcome) -> str:
    """A RunResult's outcome as a step status (`Status`); nothing but "exited 0" reads as passed."""
    if outcome.outcome == EXITED:
        return Status.PASSED if outcome.returncode == 0 else Status.FAILED
    if outcome.outcome in (NOT_FOUND, NOT_EXECUTABLE):
        return Status.FAILED
    if outcome.outcome == TIMED_OUT:
        return Status.TIMED_OUT
    if outcome.outcome in (SIGNALED, KILLED, OUT_OF_MEMORY):
        return Status.KILLED
    return Status.CAGE_ERROR  # CAGE_ERROR, and PLANTED: the cage did not hold (ADR 0019)

