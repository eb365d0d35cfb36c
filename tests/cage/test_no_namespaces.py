"""Where the kernel refuses namespaces, as users meet it (issue 7: "Where namespaces are
unavailable (a container's seccomp, Ubuntu's AppArmor userns restriction), best-effort degrades
with the exact list of what is no longer prevented ...; compat = "strict" refuses (125)").

`test_namespaces.py` forces the fallback with SANDBOY_NAMESPACES=0. Here Sandboy is not told
anything: it runs under what a real host does to it, and finds out by itself.
  - "container": a seccomp filter as Docker's default profile applies without CAP_SYS_ADMIN
    (clone with any CLONE_NEW* flag, unshare and setns refused with EPERM, clone3 ENOSYS);
  - "apparmor": the user namespace is made but mounting in it is refused (Ubuntu 24.04's
    apparmor_restrict_unprivileged_userns leaves the clone and denies the capabilities; a
    filter refusing mount and mount_setattr stands in for it here);
  - "sysctl": `user.max_user_namespaces = 0` — set inside a user namespace this test makes (the
    sysctl is per user namespace: the host's is never changed).
Checked from the host side: what `sandboy doctor`, `--dry-run` and `--status-json` say is lost,
that a best-effort run is still confined by Landlock and seccomp (attack and twin, root and uid
65534), and that a strict policy is refused with 125.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest
from cagekit import BASE_READ, SANDBOY, to_toml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from containerkit import in_container  # noqa: E402
from userkit import as_user, skip_unless_nobody_can_run, world_readable_tmp  # noqa: E402

pytestmark = pytest.mark.needs_kernel

NOBODY = 65534
SYS_PY = "/usr/bin/python3"

# What Sandboy must find out by itself, per way (the reason it reports).
REASONS = {"container": "clone: Operation not permitted",
           "apparmor": "make / private: Operation not permitted",
           "sysctl": "user.max_user_namespaces = 0"}
WAYS = tuple(REASONS)


class Host:
    """Runs `sandboy ARGS` under one of the ways, as root or as uid 65534, with a cache
    directory of its own (so no earlier note says the tier works)."""

    def __init__(self, base, way: str, uid: int = 0):
        self.base, self.way, self.uid = base, way, uid
        self.work = base / "work"
        self.work.mkdir()
        self.cache = base / "cache"
        self.src = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["sandboy"].__file__)))
        if uid:
            os.chmod(base, 0o755)
            for path in (base, self.work):
                os.chown(path, uid, uid)

    def sandboy_argv(self) -> list:
        return [SYS_PY, "-m", "sandboy"] if self.uid else [SANDBOY]

    def argv(self, args) -> list:
        sandboy = self.sandboy_argv() + list(args)
        if self.way == "sysctl":
            script = 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"'
            argv = ["unshare", "--user", "--map-root-user", "/bin/sh", "-c", script, "sh", *sandboy]
        else:
            argv = in_container(self.way, sandboy, python=SYS_PY if self.uid else sys.executable)
        if self.uid:
            argv = as_user(argv, uid=self.uid)
        return argv

    def env(self) -> dict:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.base), "SANDBOY_CACHE_DIR": str(self.cache)}
        if "SANDBOY_NATIVE" in os.environ:  # `make test`'s second pass: the pure-Python executor
            env["SANDBOY_NATIVE"] = os.environ["SANDBOY_NATIVE"]
        if self.uid:
            env["PYTHONPATH"] = self.src
        return env

    def sandboy(self, *args, policy=None) -> subprocess.CompletedProcess:
        if policy is not None:
            path = self.base / "policy.toml"
            path.write_text(to_toml(policy))
            os.chmod(path, 0o644)
            args = (args[0], "--policy", str(path), *args[1:])
        return subprocess.run(self.argv(args), capture_output=True, text=True, cwd=self.work, env=self.env(),
                              timeout=60)

    def policy(self, read=(), write=(), **sections) -> dict:
        return {"version": 1, "fs": {"read": [*BASE_READ, *read], "exec": ["/usr/bin", "/bin"],
                                     "write": [str(self.work), *write]}, **sections}


@pytest.fixture(params=WAYS)
def host(request, tmp_path):
    if request.param == "sysctl" and not shutil.which("unshare"):
        pytest.skip("needs unshare(1) to make the user namespace holding the sysctl")
    made = Host(tmp_path, request.param)
    if made.way == "sysctl":  # the host's own value is never touched: read it before and after
        with open("/proc/sys/user/max_user_namespaces") as fh:
            before = fh.read()
    yield made
    if made.way == "sysctl":
        with open("/proc/sys/user/max_user_namespaces") as fh:
            assert fh.read() == before


LOST = {  # what each lost protection's line says, by hand (one phrase each)
    "mount": "chmod/chown/utimensat/setxattr on files the uid owns outside the write roots",
    "dev": "raw block devices and other terminals",
    "ipc": "host SysV IPC",
    "pid": "host processes under a granted /proc",
    "tmp": "{tmp} is a per-run host directory",
    "netinfo": "the host's network interfaces, addresses and routes",
}


def _lost(degraded) -> list:
    return [d for d in degraded if d.startswith("namespaces unavailable")]


def test_doctor_dry_run_and_status_list_exactly_what_is_lost(host):
    reason = REASONS[host.way]
    doctor = host.sandboy("doctor", "--json")
    report = json.loads(doctor.stdout)
    assert report["protections"]["namespace_tier"] is False, report["protections"]
    assert any(f"namespace tier is unavailable ({reason})" in note and LOST["mount"] in note
               for note in report["notes"]), report["notes"]
    # a policy granting /dev and /proc, asking for {tmp} and SysV IPC, no network: six things lost, and why
    wide = host.policy(read=["/dev", "/proc"], write=["{tmp}"], ipc={"sysv": True})
    dry = json.loads(host.sandboy("run", "--dry-run", "--json", policy=wide).stdout)
    lost = _lost(dry["degraded"])
    assert len(lost) == len(LOST), lost
    for key, phrase in LOST.items():
        assert [d for d in lost if phrase in d and f"namespaces unavailable ({reason})" in d], (key, lost)
    assert dry["enforced"]["namespaces"] == {"available": False, "reason": reason}
    # a narrow policy loses only what Landlock and seccomp cannot do for it: metadata outside the
    # write roots, and (no network granted) the host's interface list
    narrow = json.loads(host.sandboy("run", "--dry-run", "--json", policy=host.policy()).stdout)
    assert [phrase for phrase in LOST.values() if any(phrase in d for d in _lost(narrow["degraded"]))] \
        == [LOST["mount"], LOST["netinfo"]], narrow["degraded"]
    # granting TCP connect means using the host's network: its interfaces are not a loss then
    online = json.loads(host.sandboy("run", "--dry-run", "--json",
                                     policy=host.policy(net={"connect_tcp": [443]})).stdout)
    assert [phrase for phrase in LOST.values() if any(phrase in d for d in _lost(online["degraded"]))] \
        == [LOST["mount"]], online["degraded"]
    status = host.base / "status.json"
    ran = host.sandboy("run", "--status-json", str(status), "--", "/bin/true", policy=wide)
    assert ran.returncode == 0 and "degraded: namespaces unavailable" in ran.stderr, ran
    assert _lost(json.loads(status.read_text())["degraded"]) == lost


ATTACKS = r"""
set -u
secret=$1 outside=$2
cat "$secret" 2>/dev/null && echo READ-SECRET
echo planted > "$outside/planted" 2>/dev/null && echo WROTE-OUTSIDE
cp /bin/sh ./rootsh && chmod 4755 ./rootsh 2>/dev/null && echo SETUID
unshare -U true 2>/dev/null && echo USERNS
echo made > mine && chmod 640 mine && touch -d @1 mine && echo TWIN
"""


def _attacks_and_twin(host):
    """Landlock (read and write outside the grants) and seccomp (setuid modes, namespaces) still
    hold; the write root still works. Checked on the host afterwards."""
    outside = host.base / "outside"
    outside.mkdir()
    secret = outside / "secret"
    secret.write_text("secret\n")
    os.chmod(secret, 0o600)
    if host.uid:
        os.chmod(outside, 0o777)
        os.chown(secret, host.uid, host.uid)
    ran = host.sandboy("run", "--", "/bin/sh", "-c", ATTACKS, "sh", str(secret), str(outside), policy=host.policy())
    assert ran.returncode == 0 and ran.stdout.split() == ["TWIN"], ran
    assert "degraded: namespaces unavailable" in ran.stderr, ran.stderr
    assert not (outside / "planted").exists() and secret.read_text() == "secret\n"
    rootsh = os.stat(host.work / "rootsh")
    assert rootsh.st_mode & 0o6000 == 0 and rootsh.st_uid == host.uid
    mine = os.stat(host.work / "mine")
    assert (stat.S_IMODE(mine.st_mode), mine.st_mtime, mine.st_uid) == (0o640, 1, host.uid)
    # the attacks are real: the same script, same user, without Sandboy, does all of it
    bare = host.base / "bare"
    bare.mkdir()
    os.chown(bare, host.uid, host.uid)
    as_host_user = as_user(uid=host.uid) if host.uid else []  # that user: no capabilities
    uncaged = subprocess.run([*as_host_user, "/bin/sh", "-c", ATTACKS, "sh", str(secret), str(outside)], cwd=bare,
                             capture_output=True, text=True, start_new_session=True)
    assert uncaged.stdout.split() == ["secret", "READ-SECRET", "WROTE-OUTSIDE", "SETUID", "USERNS", "TWIN"], uncaged


def test_best_effort_still_confines_with_landlock_and_seccomp(host):
    _attacks_and_twin(host)


def test_best_effort_still_confines_as_an_ordinary_user():
    skip_unless_nobody_can_run()
    with world_readable_tmp("sandboy-fallback-") as tmp_path:
        _best_effort_as_nobody(tmp_path)


def _best_effort_as_nobody(tmp_path):
    for way in WAYS:
        base = tmp_path / way
        base.mkdir()
        host = Host(base, way, uid=NOBODY)
        if way == "sysctl" and not shutil.which("unshare"):
            continue
        assert REASONS[way] in host.sandboy("doctor", "--json").stdout
        _attacks_and_twin(host)


def test_strict_refuses_with_125(host):
    marker = host.work / "ran"
    strict = dict(host.policy(), compat={"landlock": "strict"})
    refused = host.sandboy("run", "--", "/bin/sh", "-c", f"echo ran > {marker}", policy=strict)
    assert refused.returncode == 125, refused
    assert f"namespaces unavailable ({REASONS[host.way]})" in refused.stderr, refused.stderr
    assert not marker.exists()
    # the twin: the same policy and command where the host lets Sandboy make namespaces
    direct = subprocess.run([SANDBOY, "run", "--policy", str(host.base / "policy.toml"), "--", "/bin/sh", "-c",
                             f"echo ran > {marker}"], capture_output=True, text=True, cwd=host.work,
                            env={**host.env(), "SANDBOY_CACHE_DIR": str(host.base / "cache-direct")})
    assert direct.returncode == 0 and marker.read_text() == "ran\n", direct


def test_a_stale_note_that_the_tier_works_fails_closed(tmp_path):
    """The tier was available when Sandboy last probed (the note in its cache says so for this
    boot); now a container filter refuses it. A strict policy never runs. A best-effort policy's
    first run is refused (125, naming the step) rather than run with less than it reported; the
    note is dropped, and the next run probes again and degrades, saying so."""
    host = Host(tmp_path, "container")
    policy = host.policy()
    (tmp_path / "direct.toml").write_text(to_toml(policy))
    first = subprocess.run([SANDBOY, "run", "--policy", str(tmp_path / "direct.toml"), "--", "/bin/true"],
                           capture_output=True, text=True, cwd=host.work, env=host.env())
    assert first.returncode == 0 and "degraded" not in first.stderr, first  # outside: the tier, noted
    assert any(name.startswith("namespaces-ok") for name in os.listdir(host.cache))
    marker = host.work / "ran"
    stale = host.sandboy("run", "--", "/bin/sh", "-c", f"echo ran > {marker}", policy=policy)
    assert stale.returncode == 125 and "Operation not permitted" in stale.stderr, stale
    assert not marker.exists()
    again = host.sandboy("run", "--", "/bin/sh", "-c", f"echo ran > {marker}", policy=policy)
    assert again.returncode == 0 and "degraded: namespaces unavailable (clone" in again.stderr, again
    assert marker.read_text() == "ran\n"
