"""How a step's RunResult becomes its status, whether it fails the gate, and the gate's exit code
(`runner._status`, `StepResult.failed_gate`, `GateResult.exit_code`): pure decisions over the
outcome names (`confine.result`) and the statuses (`gate.status.Status`), checked here without
running a step. The gate's runs (tests/gate/test_runs.py and the red-team files) check the same
end to end with the kernel."""

from types import SimpleNamespace

import pytest

from sandboy.confine.result import (CAGE_ERROR, EXITED, KILLED, NOT_EXECUTABLE, NOT_FOUND, OUT_OF_MEMORY, OUTCOMES,
                                    PLANTED, SIGNALED, TIMED_OUT, RunResult)
from sandboy.exit_codes import EXIT_CAGE, EXIT_INTERRUPTED, EXIT_USAGE
from sandboy.gate.runner import GateResult, StepResult, _status
from sandboy.gate.status import Status


def _step(allow_failure=False, timeout=None):
    return SimpleNamespace(name="s", run="true", policy_ref=None, allow_failure=allow_failure, timeout=timeout)


def _ended(outcome, returncode=0, allow_failure=False, signal=None, error=None):
    """A StepResult as run_step leaves it once `outcome` came back."""
    result = StepResult(_step(allow_failure), 0)
    result.run_result = RunResult(returncode, outcome, signal, error=error, enforced={"seccomp": "on"})
    result.status = _status(result.run_result)
    return result


@pytest.mark.parametrize("outcome, returncode, status", [
    (EXITED, 0, Status.PASSED),
    (EXITED, 1, Status.FAILED),
    (EXITED, 125, Status.FAILED),    # the command's own 125 is its exit status, not a cage error
    (NOT_FOUND, 127, Status.FAILED),
    (NOT_EXECUTABLE, 126, Status.FAILED),
    (TIMED_OUT, 137, Status.TIMED_OUT),
    (SIGNALED, 139, Status.KILLED),
    (KILLED, 137, Status.KILLED),
    (OUT_OF_MEMORY, 137, Status.KILLED),
    (CAGE_ERROR, EXIT_CAGE, Status.CAGE_ERROR),
    (PLANTED, EXIT_CAGE, Status.CAGE_ERROR),  # the cage did not hold (ADR 0019)
])
def test_each_outcome_has_its_status(outcome, returncode, status):
    assert _status(RunResult(returncode, outcome)) == status


def test_every_outcome_is_covered_and_only_exited_0_passes():
    statuses = {outcome: _status(RunResult(0, outcome)) for outcome in OUTCOMES}
    assert set(statuses.values()) <= set(Status.ALL)
    assert [o for o, s in statuses.items() if s == Status.PASSED] == [EXITED]


@pytest.mark.parametrize("outcome, returncode, allow_failure, fails", [
    (EXITED, 0, False, False),
    (EXITED, 1, False, True),
    (EXITED, 1, True, False),
    (TIMED_OUT, 137, True, False),
    (CAGE_ERROR, EXIT_CAGE, True, False),
    (PLANTED, EXIT_CAGE, True, True),    # not a test's failure to allow: code left for the host's git
    (PLANTED, EXIT_CAGE, False, True),
    (OUT_OF_MEMORY, 137, False, True),
])
def test_which_ended_steps_fail_the_gate(outcome, returncode, allow_failure, fails):
    assert _ended(outcome, returncode, allow_failure).failed_gate is fails


@pytest.mark.parametrize("status, allow_failure, fails", [
    (Status.POLICY_ERROR, False, True),
    (Status.CAGE_ERROR, False, True),
    (Status.OVER_BUDGET, False, True),  # a required step never checked: the gate cannot pass
    (Status.OVER_BUDGET, True, False),
    (Status.NOT_RUN, False, False),     # left out after a failure (no --keep-going): that one failed it
    (Status.POLICY_ERROR, True, False),
])
def test_which_refused_or_unrun_steps_fail_the_gate(status, allow_failure, fails):
    result = StepResult(_step(allow_failure), 0)
    result.refuse(status, "why")
    assert result.failed_gate is fails
    assert result.run_result is None and result.signal is None and result.enforced == {}
    assert result.returncode == (EXIT_CAGE if status == Status.CAGE_ERROR else None)


def test_a_step_reads_its_runs_fields_rather_than_copying_them():
    result = _ended(SIGNALED, 139, signal=11)
    assert (result.returncode, result.signal, result.enforced) == (139, 11, {"seccomp": "on"})
    result.run_result.refuse("planted a hook", PLANTED)  # a check after the run fails it closed
    assert (result.returncode, result.signal, result.error) == (EXIT_CAGE, None, "planted a hook")


def _gate(*steps, interrupted=False):
    result = GateResult(None, "<ceiling>", list(steps), 0.0, 0.0)
    result.interrupted = interrupted
    return result


def _refused(status, allow_failure=False):
    result = StepResult(_step(allow_failure), 0)
    result.refuse(status, "why")
    return result


def test_the_gates_exit_code_by_what_its_steps_did():
    passed, failed = _ended(EXITED, 0), _ended(EXITED, 1)
    assert _gate(passed, passed).exit_code == 0
    assert _gate(passed, failed).exit_code == 1
    assert _gate(passed, _ended(EXITED, 1, allow_failure=True)).exit_code == 0
    assert _gate(failed, _ended(CAGE_ERROR, EXIT_CAGE)).exit_code == EXIT_CAGE
    assert _gate(_ended(CAGE_ERROR, EXIT_CAGE, allow_failure=True), passed).exit_code == 0
    assert _gate(_ended(PLANTED, EXIT_CAGE, allow_failure=True)).exit_code == EXIT_CAGE
    # a policy error says the gate file is wrong, whatever else happened
    assert _gate(_ended(CAGE_ERROR, EXIT_CAGE), _refused(Status.POLICY_ERROR, True)).exit_code == EXIT_USAGE
    assert _gate(failed, _refused(Status.POLICY_ERROR)).exit_code == EXIT_USAGE
    assert _gate(passed, interrupted=True).exit_code == EXIT_INTERRUPTED
    assert _gate(_refused(Status.POLICY_ERROR), interrupted=True).exit_code == EXIT_INTERRUPTED
    assert _gate(passed, _refused(Status.OVER_BUDGET)).exit_code == 1
    assert _gate().exit_code == 0
