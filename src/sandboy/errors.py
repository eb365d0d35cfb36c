"""Errors that carry the exit code the contract gives them (README.md, "Exit codes of `sandboy run`")."""

# the exit codes themselves (their own module: a plan cache hit needs them, not these classes)
from sandboy.exit_codes import (  # noqa: F401
    EXIT_CAGE, EXIT_INTERRUPTED, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, EXIT_OUTPUT_FAILED, EXIT_READER_GONE, EXIT_USAGE)


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
