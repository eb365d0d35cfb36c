"""A gate step's status: the one set of names every report writes (JSON, JUnit, Markdown, console).

A plain namespace of strings, not an Enum: the names are the reports' values as they are, and the
gate's per-step path imports nothing it does not need (docs/performance.md).
"""


class Status:
    PASSED = "passed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    KILLED = "killed"
    CAGE_ERROR = "cage_error"
    POLICY_ERROR = "policy_error"
    NOT_RUN = "not_run"
    OVER_BUDGET = "over_budget"  # not run: the gate's time budget (the operator's) was spent before it
    INTERRUPTED = "interrupted"  # the whole gate's only: the operator stopped it

    ALL = (PASSED, FAILED, TIMED_OUT, KILLED, CAGE_ERROR, POLICY_ERROR, NOT_RUN, OVER_BUDGET)
    FAILING = (FAILED, TIMED_OUT, KILLED)   # a command ran and did not pass
    REFUSED = (CAGE_ERROR, POLICY_ERROR)    # no command ran: Sandboy refused the step
    UNRUN = (NOT_RUN, OVER_BUDGET)          # no command ran and nothing was refused: never started
    NO_DETAIL = (PASSED, NOT_RUN)           # nothing to say beyond the status
