"""The exit codes the contract gives `sandboy run` and the gate (README.md, "Exit codes of
`sandboy run`"); `errors` names them too, beside the exceptions that carry them.

Apart from the exceptions so that a plan cache hit, which raises none, does not create their
three classes at every run (an exception subclass costs ≈ 0.12–0.19 M instructions to make:
docs/performance.md, "Session 12 — the plain plan-cache hit").
"""

EXIT_USAGE = 2          # usage or policy error, found before anything ran
EXIT_CAGE = 125         # the cage could not be applied: the command never ran unconfined
EXIT_NOT_EXECUTABLE = 126
EXIT_INTERRUPTED = 130  # ^C or SIGTERM stopped a gate: the shell's convention for SIGINT
EXIT_NOT_FOUND = 127
EXIT_READER_GONE = 141  # stdout's reader went away: what a shell reports for a tool ended by SIGPIPE
EXIT_OUTPUT_FAILED = 74  # stdout could not be written (a full disk, /dev/full, EIO): sysexits' EX_IOERR
