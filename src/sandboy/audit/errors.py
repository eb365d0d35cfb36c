"""Classified audit failures: one clear message and one distinct exit code each.

The exit codes are part of the CLI contract (docs/audit.md, "Exit codes").
The CLI prints `sandboy audit: <message>` and exits with `exit_code`; it never
shows a traceback for any of these.
"""

from __future__ import annotations

from typing import Any

EXIT_OK = 0
EXIT_INVALID_SARIF = 1      # `validate`: the file is not valid (errors listed)
EXIT_USAGE = 2              # bad arguments, unknown tool, missing/unreadable file
EXIT_INPUT_TOO_LARGE = 3    # an input exceeds --max-input-bytes
EXIT_ADAPTER_ERROR = 10     # the adapter rejected the input (its `err` message is shown)
EXIT_OUT_OF_FUEL = 11       # the guest used its whole fuel budget (--fuel)
EXIT_DEADLINE = 12          # the guest ran past --deadline-seconds
EXIT_MEMORY = 13            # the guest hit --memory-mib
EXIT_GUEST_CRASH = 14       # the guest trapped (uncaught exception, bug, stack exhaustion)
EXIT_INVALID_OUTPUT = 15    # the guest's output is not valid SARIF 2.1.0
EXIT_OUTPUT_TOO_LARGE = 16  # the guest's output exceeds --max-output-bytes or --max-results
EXIT_COMPONENT_REFUSED = 17  # not a component, has imports, or lacks the `to-sarif` export
EXIT_BUILD_FAILED = 18      # componentize-py missing or the adapter build failed


class AuditError(Exception):
    """Base class: `str(err)` is the whole user-facing message."""

    exit_code = EXIT_USAGE
    kind = "usage"

    def __init__(self, message: str):
        super().__init__(message)


class UsageError(AuditError):
    exit_code, kind = EXIT_USAGE, "usage"


class InputTooLarge(AuditError):
    exit_code, kind = EXIT_INPUT_TOO_LARGE, "input-too-large"


class AdapterFailed(AuditError):
    exit_code, kind = EXIT_ADAPTER_ERROR, "adapter-error"


class OutOfFuel(AuditError):
    exit_code, kind = EXIT_OUT_OF_FUEL, "out-of-fuel"


class DeadlineExceeded(AuditError):
    """The guest ran past its deadline — or, with a deadline for the whole conversion
    (`ConvertRequest.deadline_at`: a run's time budget), `step` names the part it ended or kept
    from starting ("the adapter's load", "the check of the adapter's output", …)."""

    exit_code, kind = EXIT_DEADLINE, "deadline"

    def __init__(self, message: str, step: str = "the conversion", started: bool = True):
        super().__init__(message)
        self.step = step
        self.started = started  # False: the step was never begun


class MemoryExhausted(AuditError):
    exit_code, kind = EXIT_MEMORY, "memory"


class GuestCrash(AuditError):
    exit_code, kind = EXIT_GUEST_CRASH, "guest-crash"


class InvalidOutput(AuditError):
    exit_code, kind = EXIT_INVALID_OUTPUT, "invalid-output"

    def __init__(self, message: str, problems: list[Any] | None = None):  # sarif.Problem
        super().__init__(message)
        self.problems = problems or []


class OutputTooLarge(AuditError):
    exit_code, kind = EXIT_OUTPUT_TOO_LARGE, "output-too-large"


class ComponentRefused(AuditError):
    exit_code, kind = EXIT_COMPONENT_REFUSED, "component-refused"


class BuildFailed(AuditError):
    exit_code, kind = EXIT_BUILD_FAILED, "build-failed"
