"""A plan cache miss takes the seccomp program an earlier run kept (ADR 0028, session 10).

A miss (another environment, another working directory, a policy's first run) builds the cage
again; its seccomp program is made from a handful of inputs (`protections.seccomp_inputs`) and
the code, so `sandboy run` keeps it as a piece of its own (`plan_pieces.Pieces`), keyed with
exactly those, and a miss whose inputs an earlier run saw imports no BPF assembler. Each probe
here checks from the host side (the probe's own answer to a system call, the files) that the
program a run takes is the one a build would make: a change of any input, or of the code, builds
anew; a damaged or foreign piece is built anew; a cage cannot write the pieces.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cagekit import BASE_READ, SANDBOY, to_toml

from sandboy.confine import namespaces, plan_pieces, protections
from sandboy.policy.model import Policy
from sandboy.policy.resolve import Context, plan_cache_enabled, resolve

pytestmark = pytest.mark.needs_kernel
MSG = ["sysv", "msgget-create"]  # the probe makes a SysV queue: EPERM from the filter unless `ipc.sysv`


@pytest.fixture
def tier():
    if not namespaces.availability()[0]:
        pytest.skip("the plan cache keeps runs under the namespace tier only")


class Runs:
    """Real `sandboy run`s of the probe, each policy a file of its own (its own entry: every first
    run of one is a miss), all with one cache directory (the pieces they share)."""

    def __init__(self, tmp_path: Path, probe: str):
        self.tmp, self.probe = tmp_path, probe
        self.cache = tmp_path / "cache"
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("SANDBOY_NATIVE", "SANDBOY_NAMESPACES", "SANDBOY_PLAN_CACHE")}
        self.env["SANDBOY_CACHE_DIR"] = str(self.cache)
        self.count = 0
        self.key = 0x5b0 + os.getpid() % 0x10000 * 16  # the SysV key: ours (in the cage's own IPC namespace)

    def policy(self, **sections) -> Path:
        self.count += 1
        path = self.tmp / f"p{self.count}.toml"
        path.write_text(to_toml({"version": 1, "fs": {"read": BASE_READ, "exec": [os.path.dirname(self.probe)]},
                                 **sections}))
        return path

    def run(self, policy: Path, *args, env=None, to_a_file=False):
        """(the probe's answer, whether the seccomp program was built here: the module imported).
        `to_a_file`: its stdout on a regular file (a run the plan cache never keeps)."""
        self.key += 1
        argv = [*args] if args else [*MSG, hex(self.key)]
        out = self.tmp / "out.txt"
        with open(out, "w+") as sink:
            proc = subprocess.run([sys.executable, "-X", "importtime", SANDBOY, "run", "--policy", str(policy),
                                   "--", self.probe, *argv], stdout=sink if to_a_file else subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                                  env=dict(self.env, **(env or {})), cwd=self.tmp, start_new_session=True, timeout=60)
        stdout = out.read_text() if to_a_file else proc.stdout
        imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
        assert "sandboy.confine.cage" in imported, proc.stderr[-2000:]  # a build (a miss): the measurement works
        assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
        return stdout.strip().split(" ")[0], "sandboy.confine.seccomp" in imported

    def pieces(self) -> list:
        folder = self.cache / "plan-pieces"
        return sorted(folder.iterdir()) if folder.is_dir() else []


@pytest.fixture
def runs(tmp_path, probe, tier) -> Runs:
    return Runs(tmp_path, probe)


def test_a_miss_takes_the_program_kept_for_its_inputs_and_confines_as_a_build(runs):
    """`ipc.sysv` (an input) off and on: each first run builds its program and keeps it; a later
    policy's first run with the same inputs takes the kept one (no BPF assembler) and the probe
    sees what a build gives — SysV refused by the filter without `ipc.sysv`, allowed with it.
    Without the inputs in the key the plain policy took the sysv one's program (the mutant below)."""
    assert runs.run(runs.policy(ipc={"sysv": True})) == ("ok", True)
    assert len(runs.pieces()) == 1
    assert runs.run(runs.policy()) == ("EPERM", True)  # other inputs: built (never the sysv program)
    assert len(runs.pieces()) == 2
    assert runs.run(runs.policy()) == ("EPERM", False)  # the same inputs: the kept program
    assert runs.run(runs.policy(ipc={"sysv": True})) == ("ok", False)
    assert runs.run(runs.policy(), env={"SANDBOY_PLAN_CACHE": "0"}) == ("EPERM", True)  # as with the cache off
    assert len(runs.pieces()) == 2


def test_a_run_with_stdout_on_a_file_takes_and_keeps_the_program_for_its_inputs(runs):
    """A run with stdout on a regular file (`sandboy run ... > build.log`) is never kept by the
    plan cache (no plan entry is written, checked below: each run is a build), but its seccomp
    program is keyed by exactly its inputs and code, not by fd 0-2 (ADR 0028, session 13): it
    takes a kept one and keeps the one it built. From the host side: the same answers a build
    gives — SysV refused without `ipc.sysv`, allowed with it, through each change of the input.
    With cli's `_pieces_unkept` not asked (by hand) every run below imported the BPF assembler;
    with the inputs out of the key (MUTANTS) the plain policy took the sysv one's program."""
    assert runs.run(runs.policy(ipc={"sysv": True}), to_a_file=True) == ("ok", True)
    assert len(runs.pieces()) == 1
    assert runs.run(runs.policy(), to_a_file=True) == ("EPERM", True)  # other inputs: built
    assert len(runs.pieces()) == 2
    assert runs.run(runs.policy(), to_a_file=True) == ("EPERM", False)  # the same inputs: the kept program
    assert runs.run(runs.policy(ipc={"sysv": True}), to_a_file=True) == ("ok", False)
    assert runs.run(runs.policy(), to_a_file=True) == ("EPERM", False)  # and back
    assert runs.run(runs.policy(), to_a_file=True, env={"SANDBOY_PLAN_CACHE": "0"}) == ("EPERM", True)
    assert len(runs.pieces()) == 2
    plans = runs.cache / "plans"
    assert not plans.is_dir() or not any(plans.iterdir())  # never kept: the runs above were all builds


def job_for(tmp_path, abi=6, **sections):
    policy = Policy.from_mapping({"version": 1, **sections}, str(tmp_path / "p.toml"))
    ctx = Context(cwd=str(tmp_path))
    return protections.Job(policy, resolve(policy, ctx), ctx, abi, None)


# Policies differing in every key a policy has: those with equal `seccomp_inputs` must compile
# to the same program, report and notes, whatever else differs (fs, env, limits, compat).
SHAPES = [
    {}, {"fs": {"read": ["/usr"], "write": ["{cwd}"], "deny": ["/etc/shadow"]}}, {"env": {"pass": ["PATH"]}},
    {"limits": {"processes": 64, "open_files": 128}}, {"compat": {"landlock": "strict"}},
    {"ipc": {"sysv": True}}, {"seccomp": {"deny": ["uname"]}}, {"seccomp": {"allow": ["ptrace"]}},
    {"seccomp": {"allow": ["msgget"]}, "ipc": {"sysv": False}}, {"net": {"unix": True}},
    {"net": {"connect_tcp": [443]}}, {"net": {"connect_tcp": [443], "bind_tcp": [8080]}}, {"net": {"udp": True}},
    {"net": {"unrestricted": True}}, {"net": {"bind_tcp": [8080], "unix": True}},
    {"net": {"connect_tcp": [443]}, "fs": {"read": ["/etc"]}, "env": {"set": {"A": "b"}}},
]


def test_the_program_is_made_from_its_inputs_alone(tmp_path, monkeypatch):
    """The key's completeness, from the other side: over every ABI and policy shape, two jobs with
    the same `seccomp_inputs` compile to the same program, report and notes, and jobs whose
    inputs differ get different keys (each input is in the key: `_seccomp_key`)."""
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(tmp_path / "cache"))
    seen: dict = {}
    keys = set()
    for abi in range(1, 8):
        for shape in SHAPES:
            job = job_for(tmp_path, abi, **shape)
            inputs = protections.seccomp_inputs(job)
            compiled = protections.compile_seccomp(job)
            made = (compiled.outputs["bpf"], compiled.enforced, compiled.degraded, compiled.warnings)
            assert seen.setdefault(inputs, made) == made, (abi, shape)
            if plan_cache_enabled():  # (the key names the C executor's file: SANDBOY_NATIVE=0 keeps no piece)
                keys.add(plan_pieces._seccomp_key(inputs))
    assert len(seen) > 40  # the shapes do differ
    assert len(keys) == len(seen) or not plan_cache_enabled()  # one key per distinct inputs


def test_every_input_is_read_from_the_job(tmp_path, monkeypatch):
    """Each value `seccomp_inputs` takes changes the program or its report where it matters: a
    key without one of them would hand one policy another's program (the mutant's probe is the
    run above; this one names each input)."""
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(tmp_path / "cache"))
    base = protections.seccomp_inputs(job_for(tmp_path, 6))
    other = {0: 3, 1: ("uname",), 2: ("ptrace",), 3: True, 4: True, 5: True, 6: (443,), 7: (8080,), 8: True}
    assert set(other) == set(range(len(base)))  # every input has a variant here
    first = protections.compile_seccomp_from(*base)
    for index, value in other.items():
        inputs = (*base[:index], value, *base[index + 1:])
        if index == 0:  # the ABI: where it changes what Landlock handles, the listen rule follows
            inputs = (3, *base[1:6], (443,), (), False)
            base_with_port = (6, *base[1:6], (443,), (), False)
            assert (protections.compile_seccomp_from(*inputs).enforced
                    != protections.compile_seccomp_from(*base_with_port).enforced)
            continue
        made = protections.compile_seccomp_from(*inputs)
        assert (made.outputs["bpf"], made.enforced) != (first.outputs["bpf"], first.enforced), index


def copy_package(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(Path(namespaces.__file__).parents[2] / "sandboy", tree / "sandboy",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return tree


def test_the_code_that_made_it_is_a_key(runs, tmp_path):
    """A copy of the package: a kept program is not taken once the code that makes programs has
    changed — here an edit of `seccomp.py` that lets SysV IPC through without `ipc.sysv`: the
    next miss builds with the new code (the probe's queue is made). Without the code in the key the
    old program was taken (the mutant below)."""
    tree = copy_package(tmp_path)
    runs.env["PYTHONPATH"] = str(tree)
    assert runs.run(runs.policy()) == ("EPERM", True)
    assert runs.run(runs.policy()) == ("EPERM", False)  # kept
    source = tree / "sandboy" / "confine" / "seccomp.py"
    text = source.read_text()
    assert text.count("    if not sysv:\n        names |= set(SYSV_IPC)") == 1
    source.write_text(text.replace("    if not sysv:\n        names |= set(SYSV_IPC)", "    pass"))
    assert runs.run(runs.policy()) == ("ok", True)  # the edited code's program, built
    assert runs.run(runs.policy()) == ("ok", False)


def forge(piece: Path, bpf: bytes) -> None:
    """The piece as written, with `bpf` (and its length in the report) in place of its program."""
    import marshal

    from cachekit import unsealed, write_sealed

    form, key, body = marshal.loads(unsealed(piece))
    _bpf, label, call, enforced, degraded, warnings = marshal.loads(body)
    enforced = dict(enforced, instructions=len(bpf) // 8)
    write_sealed(piece, marshal.dumps((form, key, marshal.dumps((bpf, label, call, enforced, degraded, warnings)))))


ALLOW_ALL = (0x06 | 0x7FFF0000 << 32).to_bytes(8, "little")  # one instruction: return ALLOW


@pytest.mark.parametrize("damage", ["garbage", "truncated", "another format", "empty program", "another user's",
                                    "group-writable", "ours, without a seal"])
def test_a_damaged_or_foreign_piece_is_built_anew(runs, damage):
    """Anything but a piece of ours, whole and of this format, is built anew (never an error); a
    forged allow-everything program in a piece another user owns, or one others may write, is never
    taken — the probe's SysV call is refused by a rebuilt filter. (A piece of our own is trusted as
    an entry is: whoever can write our cache can edit our policy, ADR 0028.)"""
    assert runs.run(runs.policy()) == ("EPERM", True)
    (piece,) = runs.pieces()
    data = piece.read_bytes()
    if damage == "garbage":
        piece.write_bytes(os.urandom(len(data)))
    elif damage == "truncated":
        piece.write_bytes(data[: len(data) // 2])
    elif damage == "another format":
        from cachekit import unsealed, write_sealed

        write_sealed(piece, unsealed(piece).replace(plan_pieces.PIECE_FORMAT.encode(), b"sandboy plan piece 0"))
    elif damage == "empty program":
        forge(piece, b"")
    else:
        forge(piece, ALLOW_ALL)
        if damage == "another user's":
            if os.geteuid() != 0:
                pytest.skip("giving a file away needs root")
            os.chown(piece, 65534, 65534)
        elif damage == "ours, without a seal":  # what a checkout ships in a cache kept in the working copy (ADR 0030)
            from cachekit import unsealed

            piece.write_bytes(unsealed(piece))
        else:
            piece.chmod(0o620)
    assert runs.run(runs.policy()) == ("EPERM", True)


def test_a_forged_piece_of_our_own_is_what_the_owner_check_stands_for(runs):
    """The twin of the foreign piece above (so that probe can fail): the same forged program in a
    piece of our own, mode 0600, IS taken — the probe's call is then not refused."""
    assert runs.run(runs.policy()) == ("EPERM", True)
    (piece,) = runs.pieces()
    forge(piece, ALLOW_ALL)
    assert runs.run(runs.policy()) == ("ok", False)


def test_a_cage_cannot_write_the_pieces(runs, tmp_path):
    """The pieces live in Sandboy's cache, which every cage is denied (ADR 0006) — also where a
    write root holds it: from inside, writing, replacing or removing a piece is refused, and the
    host sees the same bytes and inode."""
    assert runs.run(runs.policy()) == ("EPERM", True)
    (piece,) = runs.pieces()
    before = (piece.read_bytes(), piece.stat().st_ino)
    script = (f'echo x > {piece}; echo y > {piece}.new && mv {piece}.new {piece}; rm -f {piece}; '
              f'mv {piece.parent} {tmp_path}/moved; echo done')
    policy = tmp_path / "w.toml"
    policy.write_text(to_toml({"version": 1, "fs": {"read": ["/usr", "/etc", "/lib", "/lib64"],
                                                    "exec": ["/usr/bin", "/bin"], "write": [str(tmp_path)]}}))
    proc = subprocess.run([SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c", script],
                          capture_output=True, text=True, env=runs.env, cwd=tmp_path, stdin=subprocess.DEVNULL,
                          start_new_session=True, timeout=60)
    assert proc.stdout.strip() == "done", proc.stderr[-2000:]
    assert (piece.read_bytes(), piece.stat().st_ino) == before


# Each check of a kept piece, taken out of a copy of the package: its probe above then sees the
# wrong program run. (source text, replacement)
MUTANTS = {  # (module file, source text, replacement)
    "the inputs": ("plan_pieces.py", 'return ("seccomp", inputs,', 'return ("seccomp", (),'),
    "the code": ("plan_pieces.py", "os.uname().machine, _code_of(SECCOMP_CODE))", "os.uname().machine)"),
    "the owner": ("_libc.py", "st.st_mode & 0o170000 != 0o100000 or st.st_uid != os.geteuid() or",
                  "st.st_mode & 0o170000 != 0o100000 or"),  # (the cache's one reader: `_libc.read_private`)
}


@pytest.mark.parametrize("mutant", MUTANTS)
def test_each_check_of_a_piece_has_a_probe_that_fails_without_it(runs, tmp_path, mutant):
    tree = copy_package(tmp_path)
    where, text, replacement = MUTANTS[mutant]
    source = tree / "sandboy" / "confine" / where
    assert source.read_text().count(text) == 1, mutant
    source.write_text(source.read_text().replace(text, replacement))
    runs.env["PYTHONPATH"] = str(tree)
    if mutant == "the inputs":  # test_a_miss_takes_the_program_kept_for_its_inputs...
        assert runs.run(runs.policy(ipc={"sysv": True})) == ("ok", True)
        assert runs.run(runs.policy()) == ("ok", False)  # the sysv policy's program: SysV let through
        # ... and test_a_run_with_stdout_on_a_file_takes_and_keeps_the_program_for_its_inputs
        assert runs.run(runs.policy(), to_a_file=True) == ("ok", False)
    elif mutant == "the code":  # test_the_code_that_made_it_is_a_key
        assert runs.run(runs.policy()) == ("EPERM", True)
        seccomp = tree / "sandboy" / "confine" / "seccomp.py"
        seccomp.write_text(seccomp.read_text().replace("    if not sysv:\n        names |= set(SYSV_IPC)", "    pass"))
        assert runs.run(runs.policy()) == ("EPERM", False)  # the old code's program
    else:  # test_a_damaged_or_foreign_piece_is_built_anew[another user's]
        if os.geteuid() != 0:
            pytest.skip("giving a file away needs root")
        assert runs.run(runs.policy()) == ("EPERM", True)
        (piece,) = runs.pieces()
        forge(piece, ALLOW_ALL)
        os.chown(piece, 65534, 65534)
        assert runs.run(runs.policy()) == ("ok", False)  # the forged program ran
