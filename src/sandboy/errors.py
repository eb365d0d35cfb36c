"""Errors that carry the exit code the contract gives them (README.md, "Exit codes of `sandboy run`")."""

EXIT_USAGE = 2          # usage or policy error, found before anything ran
EXIT_CAGE = 125         # the cage could not be applied: the command never ran unconfined
EXIT_NOT_EXECUTABLE = 126
EXIT_INTERRUPTED = 130  # ^C or SIGTERM stopped a gate: the shell's convention for SIGINT
EXIT_NOT_FOUND = 127
EXIT_READER_GONE = 141  # stdout's reader went away: what a shell reports for a tool ended by SIGPIPE
EXIT_OUTPUT_FAILED = 74  # stdout could not be written (a full disk, /dev/full, EIO): sysexits' EX_IOERR


class SandboyError(Exception):
    exit_code = 1


class PolicyError(SandboyError):
    """A policy (or gate) file is wrong. The message is `FILE: key: what was expected`."""

    exit_code = EXIT_USAGE

    def __init__(self, source: str, key: str, problem: str):
        self.source = source
        self.key = key
        self.problem = problem
        super().__init__(f"{source}: {key}: {problem}" if key else f"{source}: {problem}")


class CageError(SandboyError):
    """A protection the policy asks for cannot be applied on this machine."""

    exit_code = EXIT_CAGE
