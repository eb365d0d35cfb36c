"""A caller whose fd 0-2 are closed (rvsec8, session 8; so already at 79857ce).

Bug: every descriptor a run made took the lowest free number — a closed fd 0-2 — and the child's
plan then redirected the command's stdio onto it by dup2: `sandboy.run(..., stdin=a, stdout=b)`
from a process with fd 0 and 1 closed was refused 125 "Landlock rule for /dev: File descriptor in
bad state" (the ruleset replaced by the caller's file), and once the ruleset was out of the way,
the child's report pipe on fd 1 was replaced too: 16 bytes of report were written into the
caller's stdout file. Fix: the ruleset never lives on fd 0-2 (_libc.above_stdio), and a run
started from the API or the CLI puts /dev/null on a closed fd 0-2 first (hygiene.hold_free_stdio).

Decision: a command whose caller had no fd 0-2 gets /dev/null there (as a daemon's stdio is),
not a closed fd: then nothing the run opens can be taken for the command's stdio. The API closes
its /dev/null again once the run has started (the caller's fd table is as it was).

Every case runs in a fresh process that closes its own fds (the test process keeps its own), with
each executor (SANDBOY_NATIVE=1: the C one, 0: the pure-Python one).
"""

import os
import subprocess
import sys
import textwrap

import pytest

POLICY = {"version": 1, "fs": {"read": ["/usr", "/etc", "/proc"],
                               "exec": ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]}}
EXECUTORS = pytest.mark.parametrize("native", ["1", "0"])


def _in_fresh_process(tmp_path, native, body: str) -> str:
    """Run `body` in a new interpreter after the header (sandboy imported, POLICY as `pol`,
    `d` the test's dir); what it writes to `d/log` (its own fds 0-2 are closed by `body`)."""
    script = textwrap.dedent("""\
        import os, sys
        import sandboy
        d = sys.argv[1]
        pol = sandboy.Policy.from_mapping(%r, "<test>")
        log = os.open(f"{d}/log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        def say(text):
            os.write(log, (text + "\\n").encode())
        """) % (POLICY,) + textwrap.dedent(body)
    (tmp_path / "probe.py").write_text(script)
    env = {**os.environ, "SANDBOY_NATIVE": native}
    done = subprocess.run([sys.executable, str(tmp_path / "probe.py"), str(tmp_path)], env=env,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    return (tmp_path / "log").read_text()


@EXECUTORS
def test_files_handed_in_by_a_caller_without_fd_0_and_1(tmp_path, native):
    # probe: the command writes its stdout and tries to widen the caller's 0600 file through it
    (tmp_path / "in").write_text("INPUT-DATA\n")
    out = tmp_path / "out"
    out.write_text("")
    out.chmod(0o600)
    log = _in_fresh_process(tmp_path, native, """\
        a = os.open(f"{d}/in", os.O_RDONLY)
        b = os.open(f"{d}/out", os.O_WRONLY)
        os.close(0); os.close(1)
        r = sandboy.run(["/usr/bin/python3", "-c", "import os, sys; sys.stdout.write(sys.stdin.read().upper());"
                         "sys.stdout.flush(); os.fchmod(1, 0o666)"], pol, stdin=a, stdout=b, stderr=log)
        say(f"rc={r.returncode} error={r.error}")
        say("fds 0 1 after: " + " ".join(str(os.path.exists(f"/proc/self/fd/{n}")) for n in (0, 1)))
        """)
    # the command ran (no 125), its output and nothing else is in the file (no report bytes)
    assert out.read_bytes() == b"INPUT-DATA\n".upper()
    # still confined: its fchmod through its stdout reached the relay's pipe, not the caller's
    # file (checked on the host); the run itself ended well
    assert out.stat().st_mode & 0o777 == 0o600
    assert "rc=0 error=None" in log, log
    assert "fds 0 1 after: False False" in log, log  # the caller's closed fds are closed again


@EXECUTORS
def test_a_cage_built_while_fd_0_and_1_were_closed(tmp_path, native):
    # the ruleset made with fd 0-2 free (a prebuilt cage: before the run's /dev/null) lives at 3+
    (tmp_path / "in").write_text("INPUT-DATA\n")
    (tmp_path / "out").write_text("")
    log = _in_fresh_process(tmp_path, native, """\
        from sandboy.confine.cage import build
        a = os.open(f"{d}/in", os.O_RDONLY)
        b = os.open(f"{d}/out", os.O_WRONLY)
        os.close(0); os.close(1)
        cage = build(pol, cwd="/")
        say(f"ruleset fd {cage.ruleset.fd}")
        r = sandboy.run(["/bin/cat"], cage, stdin=a, stdout=b, stderr=log)
        say(f"rc={r.returncode} error={r.error}")
        """)
    assert "rc=0 error=None" in log, log
    assert int(log.split("ruleset fd ")[1].split()[0]) > 2, log
    assert (tmp_path / "out").read_text() == "INPUT-DATA\n"


@EXECUTORS
@pytest.mark.parametrize("closed", [(0, 1), (0, 1, 2)])
def test_a_command_inheriting_closed_stdio_gets_dev_null(tmp_path, native, closed):
    # twin: /bin/true and a command writing to its stdout both run; fd 0-2 the caller had closed
    # are /dev/null for the command (what it sees, written to a file handed in as its stdout)
    report = tmp_path / "seen"
    report.write_text("")
    log = _in_fresh_process(tmp_path, native, f"""\
        seen = os.open(f"{{d}}/seen", os.O_WRONLY)
        for n in {closed!r}:
            os.close(n)
        r = sandboy.run(["/bin/true"], pol)
        say(f"true rc={{r.returncode}} error={{r.error}}")
        r = sandboy.run(["/bin/echo", "hello"], pol)
        say(f"echo rc={{r.returncode}} error={{r.error}}")
        r = sandboy.run(["/bin/sh", "-c", "readlink /proc/self/fd/0 /proc/self/fd/2"], pol, stdout=seen)
        say(f"readlink rc={{r.returncode}} error={{r.error}}")
        """)
    assert "true rc=0 error=None" in log, log
    assert "echo rc=0 error=None" in log, log  # its stdout: /dev/null, not EBADF nor a pipe of ours
    assert "readlink rc=0 error=None" in log, log
    stdin, stderr = report.read_text().splitlines()
    assert stdin == "/dev/null"
    assert (stderr == "/dev/null") == (2 in closed), stderr  # fd 2 left open: the caller's pipe


@EXECUTORS
def test_sandboy_run_started_with_fd_0_to_2_closed(tmp_path, native):
    # the CLI: no traceback (sys.stdout was None), the command runs with /dev/null on fd 0-2
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/etc", "/proc"]\n'
                      'exec = ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]\n'
                      f'write = ["{tmp_path}"]\n')
    sandboy = os.path.join(os.path.dirname(sys.executable), "sandboy")
    seen = tmp_path / "seen"
    probe = (f"import os; seen = [os.readlink(f'/proc/self/fd/{{n}}') for n in range(3)]; "
             f"open('{seen}', 'w').write(' '.join(seen))")
    done = subprocess.run(["/bin/sh", "-c", f'"$0" run --policy {policy} -- /usr/bin/python3 -c "{probe}" '
                           '0<&- 1>&- 2>&-; echo "rc=$?" > ' + str(tmp_path / "rc"), sandboy],
                          env={**os.environ, "SANDBOY_NATIVE": native}, timeout=120)
    assert done.returncode == 0
    assert (tmp_path / "rc").read_text() == "rc=0\n"
    assert seen.read_text() == "/dev/null /dev/null /dev/null"


# Long-lived descriptors Sandboy keeps across runs, each made here while fd 0-2 are closed
# (session 9, stdiofix): each took the lowest free number, a fd 0-2, where the next run found
# "the caller's stdio" — the kept mountinfo fd on fd 0 refused every later run under the tier
# (125 "fd 0 is a file the cage cannot reopen ... under /proc") and gave the command no
# /dev/null without it; a memory group's join fd on fd 1 would have the command's join write
# into the file the caller handed in as its stdout (and the command stay outside the group).
LONG_LIVED = {
    "ruleset": "from sandboy.confine.cage import build; kept = build(pol, cwd='/')",
    "mountinfo watch": "from sandboy.confine import kernel_mounts; kept = kernel_mounts.generation()",
    "egress fallback listener": ("os.environ['SANDBOY_NAMESPACES'] = '0'\n"
                                 "from sandboy.confine.cage import build\n"
                                 "kept = build(sandboy.Policy.from_mapping(dict(%r, net={'domains': ['example.com']}), "
                                 "'<test>'), cwd='/')\n"
                                 "del os.environ['SANDBOY_NAMESPACES']" % (POLICY,)),
    "pids cgroup": ("from sandboy.confine.cgroup import PidsCgroup\n"
                    "kept = PidsCgroup.create(64)\n"
                    "kept is not None and kept.current()"),
    "memory cgroup": ("from sandboy.confine.cgroup import MemoryCgroups\n"
                      "kept = MemoryCgroups(keep=True)\n"
                      "group = kept.take(64)\n"
                      "group is not None and (group.usage_bytes(), kept.give_back(group))"),
}


@EXECUTORS
@pytest.mark.parametrize("kind", list(LONG_LIVED))
def test_a_long_lived_fd_made_while_fd_0_to_2_were_closed_is_never_there(tmp_path, native, kind):
    # host side (the fresh process's own fd table, and what its command sees): none of Sandboy's
    # kept descriptors on fd 0-2; twin: a run afterwards gives the command /dev/null there
    seen = tmp_path / "seen"
    log = _in_fresh_process(tmp_path, native, "for n in (0, 1, 2):\n    os.close(n)\n" + LONG_LIVED[kind] + f"""
say("on fd 0-2: " + " ".join(os.readlink(f"/proc/self/fd/{{n}}") if os.path.exists(f"/proc/self/fd/{{n}}")
                             else "-" for n in range(3)))
r = sandboy.run(["/bin/sh", "-c", "x=$(readlink /proc/$$/fd/0 /proc/$$/fd/1 /proc/$$/fd/2); echo $x > {seen}"],
                sandboy.Policy.from_mapping(dict({POLICY!r}, fs=dict({POLICY!r}["fs"], write=[d])), "<test>"))
say(f"run rc={{r.returncode}} error={{r.error}}")
""")
    assert "on fd 0-2: - - -" in log, log
    assert "run rc=0 error=None" in log, log
    assert seen.read_text() == "/dev/null /dev/null /dev/null\n"
