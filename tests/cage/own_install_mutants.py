"""The own-installation mutants, run BY the installation under attack (test_mutations_protected.py).

Sandboy protects the installation that runs it (confine/own_install.py): the mutants must be
set in a process whose `sandboy` is imported from a bench installation that the cage's write
roots hold — never this checkout's, which a surviving mutant would let the command change. So
test_mutations_protected.py starts the bench's own interpreter on this file; it imports
`sandboy` from the bench (its .pth), then mutantkit (tests/cage) and pytest (the test
environment's site-packages, appended after: `sandboy` is already imported from the bench),
runs the mutants with the in-process API and prints the outcome as JSON on its last line.

argv[1]: JSON {"base", "tests", "site", "targets": {attack: path}, "policies": [[write roots,
[attacks that policy must refuse]], ...], "script", "overlay": an empty directory, or absent;
"kinds": the kinds to drop one at a time (default: all), "structural": also the other mutants,
"made_if_missing": also that mutant, "remove_after": directories removed after every run}.
"""

import json
import os
import shutil
import sys
import tempfile

ARGS = json.loads(sys.argv[1])

import sandboy  # noqa: E402  (from the bench installation: checked below)

assert os.path.realpath(sandboy.__file__).startswith(os.path.realpath(ARGS["base"]) + "/"), sandboy.__file__
sys.path.extend([ARGS["tests"], ARGS["site"]])

from installkit import restore, state  # noqa: E402
from mutantkit import Mutant, mutant, on_a_private_tmpfs, run_mutants  # noqa: E402


def overlay_the_base_prefix(scratch: str) -> None:
    """For the policy granting the interpreter's own installation (the base prefix): this process
    gets a private mount namespace (mutantkit: private before any mount) with a tmpfs on
    `scratch` and an overlay on the base prefix whose upper layer is there, so what a surviving
    mutant lets the command write lands in memory and vanishes with this process. Refuses to go
    on unless the overlay is in place."""
    import ctypes
    import pathlib

    before = os.stat(sys.base_prefix).st_dev
    on_a_private_tmpfs(pathlib.Path(scratch))
    os.mkdir(f"{scratch}/upper")
    os.mkdir(f"{scratch}/work")
    options = f"lowerdir={sys.base_prefix},upperdir={scratch}/upper,workdir={scratch}/work".encode()
    if ctypes.CDLL(None, use_errno=True).mount(b"overlay", os.fsencode(sys.base_prefix), b"overlay", 0, options) != 0:
        raise OSError(ctypes.get_errno(), "an overlay on the base prefix")
    assert os.stat(sys.base_prefix).st_dev != before, "the base prefix is not the overlay"


if ARGS.get("overlay"):
    overlay_the_base_prefix(ARGS["overlay"])

from sandboy import Policy, run  # noqa: E402
from sandboy.confine import own_install, protected, protections  # noqa: E402

KINDS = ("prefix", "base prefix", "package", "import path", "import path (PYTHONPATH)", "user site", "pycache prefix",
         "console script", "next environment")
TARGETS = ARGS["targets"]
SNAPSHOT = {name: state(path) for name, path in TARGETS.items()}


def judge(_mutant):
    """None if every attack each policy must refuse was refused (host side: the target is as it
    was), under the namespace tier and with it forced off; else what changed."""
    changed = []
    for mode in ("tier", "landlock-only"):
        if mode == "landlock-only":
            os.environ["SANDBOY_NAMESPACES"] = "0"
        else:
            os.environ.pop("SANDBOY_NAMESPACES", None)
        for write, must_refuse in ARGS["policies"]:
            policy = {"version": 1, "fs": {"read": ["/usr", "/etc/ld.so.cache", ARGS["base"]],
                                           "exec": ["/usr/bin", "/bin"], "write": write}}
            with open(os.devnull, "wb") as null, tempfile.TemporaryFile() as err:
                # builtin_hooks=(): no post-run git check — it judges git files, none of these, and
                # would walk the base prefix's 60,000 files after every run
                result = run(["/bin/sh", ARGS["script"]], Policy.from_mapping(policy, "<own-install mutants>"),
                             cwd=ARGS["base"], timeout=60, stdin=null.fileno(), stdout=null.fileno(), stderr=err.fileno(),
                             builtin_hooks=())
                err.seek(0)
                assert result.returncode == 0, (result.returncode, result.error, err.read()[-2000:])
            for name in must_refuse:
                if state(TARGETS[name]) != SNAPSHOT[name]:
                    changed.append(f"{mode}: {name} ({len(write)} roots)")
            after_each()
    os.environ.pop("SANDBOY_NAMESPACES", None)
    return f"now writable: {', '.join(changed)}" if changed else None


def after_each():
    for name, path in TARGETS.items():
        restore(path, SNAPSHOT[name])
    for directory in ARGS.get("remove_after", ()):  # missing at launch, every run
        shutil.rmtree(directory, ignore_errors=True)


def _inside_skipping_a_row_equal_to_a_write_root(write_roots, lookups=None, original=own_install.inside):
    """The rule before session 6's review: an import path entry that IS a write root was left
    out (only the package inside it protected), so the write root stayed writable."""
    roots = {os.path.realpath(root) for root in write_roots}
    resolved = own_install._resolved()
    own_install._RESOLVED = tuple(row for row in resolved if not (row[1] == "import path" and row[2] in roots))
    try:
        return original(write_roots, lookups)
    finally:
        own_install._RESOLVED = resolved


def main():
    found = own_install.installation()
    # each of these also forgets the installation as resolved (own_install._resolved caches it
    # per process, so a mutant of what it is made from must be resolved again)
    forget = (own_install, "_RESOLVED", None)
    mutants = [Mutant(f"kind {kind} not protected",
                      ((own_install, "installation", lambda kind=kind: tuple(row for row in found if row[1] != kind)),
                       forget)) for kind in ARGS.get("kinds", KINDS)]
    if ARGS.get("made_if_missing"):
        mutants.append(mutant("a missing directory it reads code from not made", own_install, "MADE_IF_MISSING",
                              frozenset()))
    if ARGS.get("structural", True):
        mutants.append(Mutant("symlinks on the way to it not protected",
                              ((protected, "symlinks_on_the_way", lambda path, limit=40: []), forget)))
        mutants += [mutant(*row) for row in [
            ("installation not protected at all", own_install, "inside", lambda write_roots, lookups=None: []),
            ("a write root inside the installation left writable", own_install, "ALL_OURS", frozenset()),
            ("an import path entry that is a write root left writable", own_install, "inside",
             _inside_skipping_a_row_equal_to_a_write_root),
            ("not added to the protected paths", protections, "protected_paths",
             lambda write, explicit, defaults, work=(), managers=None, notes=None, lookups=None:
             (*protected.resolve_protected(write, explicit, defaults, managers, lookups), [])),
        ]]
    outcome = run_mutants(mutants, judge, budget_seconds=float(ARGS.get("budget", 90)))
    outcome["installation"] = [list(row) for row in found]
    print(json.dumps(outcome))


main()
