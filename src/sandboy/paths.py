"""Whether a path lies within a directory: the one rule (`is_within`), for the policy's resolution,
the cage's build and the checks a write-root run makes after it (the git check, the kernel mounts
below a write root, the mode guard).

A module of its own so that a plan cache hit with write roots, whose checks need only this, does
not load the resolver (≈ 19 kB of code and two classes) and the `sandboy.policy` package; import it
from here (`policy.resolve` re-exports it for the modules that need the resolver anyway).
"""


def is_within(path: str, root: str) -> bool:
    """True when `path` is `root` or lies beneath it, comparing whole components ("/a/bc" is
    not within "/a/b"). Both must be normalized the same way (both realpaths, or both as
    resolved); this is the one place the rule is written."""
    if root.endswith("/"):  # "/" itself, or a root not normalized: the rule as written above
        return path == root or path.startswith(root.rstrip("/") + "/")
    # the same answer without making root + "/" (called ≈ 100 times a build)
    return path.startswith(root) and (len(path) == len(root) or path[len(root)] == "/")


def is_within_any(path: str, roots) -> bool:
    """True when `path` is within (`is_within`) at least one of `roots`; False for no roots."""
    return any(is_within(path, root) for root in roots)
