"""What happened to one confined command: the outcome names, `RunResult`, and how a wait status
plus what the child reported on its error pipe become one.

Every way of running a command ends here: exec mode under the namespace tier (on a failed start
only), a `supervision.Supervision` (the gate's steps, and the forked supervisor of `sandboy run`
and the API), and a direct child of the API (`launch.spawn(supervise=False)`).
"""

import _signal as signal  # the C module: `signal` imports enum (≈ 6 ms of start-up)
import os

from sandboy.errors import EXIT_CAGE, EXIT_NOT_FOUND

# What happened to a run (`RunResult.outcome`). Plain strings, so JSON reports carry them as they
# are, and no `enum` import on the `sandboy run` path.
EXITED = "exited"                  # the command exited by itself; `returncode` is its status
SIGNALED = "signaled"              # the command died of a signal it got (128 + n)
TIMED_OUT = "timed_out"            # the deadline passed: the tree was killed (128 + 9)
KILLED = "killed"                  # the caller ended the run (kill(), SIGTERM to the supervisor)
CAGE_ERROR = "cage_error"          # the cage could not be applied: nothing ran (125)
NOT_FOUND = "not_found"            # the command does not exist inside the cage (127)
NOT_EXECUTABLE = "not_executable"  # it exists but cannot be executed there (126)
OUT_OF_MEMORY = "out_of_memory"    # its memory cgroup's bound was reached: the OOM killer ended it (ADR 0027)
PLANTED = "planted"                # it ran, and left code for the host's next git command (125, ADR 0019)
# The wait status of a command reaped by someone else (never a real one: those are >= 0).
STATUS_LOST = -1
STATUS_LOST_ERROR = ("the command's exit status was lost: its process was reaped before Sandboy could wait "
                     "for it (this process ignores SIGCHLD or has SA_NOCLDWAIT set, or something in it "
                     "waits for any child) and nothing reported it (there is no namespace init without "
                     "the tier; an init killed from outside reports nothing); keep SIGCHLD at SIG_DFL, "
                     "or let Sandboy supervise the run (spawn(supervise=True))")
OUTCOMES = (EXITED, SIGNALED, TIMED_OUT, KILLED, CAGE_ERROR, NOT_FOUND, NOT_EXECUTABLE, PLANTED, OUT_OF_MEMORY)


class RunResult:
    """What happened to one confined command.

    `outcome`: one of OUTCOMES. `returncode` follows docs/design.md's exit codes. `signal`: the signal
    that ended the command, or None. `error`: why the command did not run or was cut short, in
    words — which cage step failed and why, "bash: No such file or directory" for an exec that
    failed, a pids-cgroup refusal, "the sandboy supervisor died" — or None for a run that
    reached its own end (even a failing one: its exit status says how it went).
    """

    __slots__ = ("returncode", "outcome", "signal", "duration", "error", "enforced", "degraded", "warnings",
                 "egress")
    # What a stop hook (supervision.Hook) may add, carried from a forked supervisor to its caller
    # on the status pipe: slot -> the module whose `summary_to_text(value)` and
    # `summary_from_text(text)` put it in one line (no json on the way unless needed). A hook
    # that reports something new adds its slot and its module here.
    CARRIED = {"egress": "sandboy.egress.session"}

    def __init__(self, returncode, outcome, signal=None, duration=0.0, error=None,
                 enforced=None, degraded=(), warnings=(), egress=None):
        self.returncode = returncode
        self.outcome = outcome
        self.signal = signal
        self.duration = duration
        self.error = error
        self.enforced = enforced or {}
        self.degraded = list(degraded)
        self.warnings = list(warnings)
        self.egress = egress  # with net.domains: the proxy's mode and allow/deny counts

    @property
    def ok(self) -> bool:
        return self.outcome == EXITED and self.returncode == 0

    def refuse(self, error: str, outcome: str = CAGE_ERROR) -> None:
        """Fail this run closed (125), whatever its own status: something its supervision
        needed failed (CAGE_ERROR), or a check after it found what the cage should have held
        (PLANTED)."""
        self.returncode, self.outcome, self.signal, self.error = EXIT_CAGE, outcome, None, error

    def report_cage(self, cage) -> None:
        """What `cage` enforced, what degraded and its warnings, on this result (every way of
        running a command ends with this)."""
        self.enforced = cage.enforced
        self.degraded = list(cage.degraded)
        self.warnings = list(cage.warnings)

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}

    def to_record(self) -> bytes:
        """What a forked supervisor writes on its status pipe (`from_record` reads it back)."""
        fields = [self.outcome, str(self.returncode), str(self.signal or 0), self.error or ""]
        for name, module in self.CARRIED.items():
            value = getattr(self, name)
            if value is not None:
                codec = __import__(module, fromlist=["summary_to_text"])
                fields.append(f"{name}={codec.summary_to_text(value)}")
        return "\0".join(fields).encode()

    @classmethod
    def from_record(cls, data: bytes):
        """The RunResult a supervisor wrote, or None for anything else (it died before writing)."""
        record = data.decode("utf-8", "replace").split("\0")
        if len(record) < 4 or record[0] not in OUTCOMES:
            return None
        outcome, code, sig, error, *carried = record
        result = cls(int(code), outcome, int(sig) or None, error=error or None)
        for item in carried:
            name, _, text = item.partition("=")
            if name in cls.CARRIED:
                codec = __import__(cls.CARRIED[name], fromlist=["summary_from_text"])
                setattr(result, name, codec.summary_from_text(text))
        return result

    def __repr__(self):
        return (f"RunResult(outcome={self.outcome!r}, returncode={self.returncode}, signal={self.signal}, "
                f"error={self.error!r})")


def child_message(argv, cage, stdio, data: bytes, first=(), in_command=()) -> tuple:
    """(message, status) from the child's error pipe: the message is "cage:<text>" /
    "exec:<code>:<text>" / ""; the status is the command's wait status as the namespace's init
    reported it (None without the tier: the caller's own wait status is the command's)."""
    from sandboy.confine import _libc

    error, status = _libc.read_child_report(data)
    if error is None:
        return "", status
    index, err = error
    if index >= 0 and cage.tier is not None:
        labels = [label for label, _ in cage.child_plan(cage.plan(stdio), first, in_command)]
        # the kernel refused the tier after all: probe anew
        if index < len(labels) and labels[index] in cage.tier.labels:
            from sandboy.confine.namespaces import forget

            forget()
    if index >= 0:
        return "cage:" + cage.describe_failure(index, err, stdio, first, in_command), status
    reason = ""
    import errno  # only for a failed exec: not on a supervised `sandboy run`'s path (≈ 0.05 ms)

    if err == errno.EACCES:
        from sandboy.confine import explain

        reason = explain.not_executable(argv[0], cage)
    return f"exec:{_libc.exit_code_for_exec_error(err)}:{argv[0]}: {os.strerror(err)}" + (f": {reason}" if reason else ""), status


def classify(status: int, message: str, outcome=None) -> RunResult:
    """A wait status plus the child's message (see `child_message`) as a RunResult. `outcome`:
    TIMED_OUT or KILLED when the supervision ended the run."""
    kind, _, detail = message.partition(":")
    if kind == "cage":
        return RunResult(EXIT_CAGE, CAGE_ERROR, error=detail)
    if kind == "exec":
        code_text, _, text = detail.partition(":")
        code = int(code_text)
        return RunResult(code, NOT_FOUND if code == EXIT_NOT_FOUND else NOT_EXECUTABLE, error=text)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return RunResult(128 + sig, outcome or SIGNALED, sig)
    code = os.waitstatus_to_exitcode(status)
    if outcome is not None:  # timed out or killed, but the command exited on its own first
        return RunResult(128 + signal.SIGKILL, outcome, signal.SIGKILL)
    return RunResult(code, EXITED)


def from_child(status: int, report: bytes, argv, cage, stdio=(None, None, None), first=(), outcome=None,
               in_command=()) -> RunResult:
    """The RunResult of a child started by `Cage.start_child`: its wait status (as its parent
    reaped it), what it wrote on its error pipe, and `outcome` as in `classify`."""
    message, reported = child_message(argv, cage, stdio, report, first, in_command)
    if reported is None and status == STATUS_LOST:
        if outcome is not None:  # ended by its supervision (killed, timed out): SIGKILL is what it got
            status = signal.SIGKILL
        elif not message:  # a failed start is told by the report alone
            return RunResult(EXIT_CAGE, CAGE_ERROR, error=STATUS_LOST_ERROR)
    return classify(status if reported is None else reported, message, outcome)
