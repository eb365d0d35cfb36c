"""Sandboy: contain untrusted commands, parser input and agent capabilities on Linux.

The public Python API is small and imported lazily so that `import sandboy` stays
cheap on the `sandboy run` start-up path:

    from sandboy import Policy, run
    policy = Policy.load("step.toml")
    result = run(["make", "test"], policy, cwd="/src/repo", timeout=600)
"""

__version__ = "0.1.0"

# Serve the run path's modules from one validated byte-code file (ADR 0023, docs/performance.md).
from sandboy import bytecode_bundle as _bytecode_bundle

_bytecode_bundle.install(__path__[0])

__all__ = ["Policy", "PolicyError", "CageError", "RunResult", "run", "spawn", "__version__"]


def __getattr__(name: str):
    # PEP 562 lazy exports: `sandboy run` imports only what its path needs.
    if name in ("Policy",):
        from sandboy.policy.model import Policy

        return Policy
    if name in ("PolicyError", "CageError"):
        from sandboy import errors

        return getattr(errors, name)
    if name in ("run", "spawn", "RunResult"):
        from sandboy.confine import launch

        return getattr(launch, name)
    raise AttributeError(f"module 'sandboy' has no attribute {name!r}")
