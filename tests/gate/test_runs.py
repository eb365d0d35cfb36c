"""Real gates on the real kernel: exfiltration with a listening host, the legitimate twins that
prove the listener works, ceiling narrowing as real runs, outcomes, timeouts and process trees."""

from __future__ import annotations

import json
import os
import textwrap
import shutil
import socket
import time
from pathlib import Path

import pytest
from gatekit import DEMO, FAKE_KEY, by_name, kill_survivors, make_repo, run_gate, run_json, survivors

from sandboy.gate import ceiling as ceilings


def ceiling_file(tmp_path: Path, **sections) -> Path:
    """The built-in ceiling as a `--ceiling` file, with `sections` replaced."""
    path = tmp_path / "ceiling.toml"
    path.write_text(ceilings.to_toml({**ceilings.BUILTIN, **sections}))
    return path


def hostile_repo(tmp_path: Path, step: str, policy: str = "") -> Path:
    repo = make_repo(tmp_path, f'[[step]]\nname = "attack"\nrun = "{step}"\n' + (
        'policy = "p"\n[policy.p]\nversion = 1\n' + policy if policy else ""))
    shutil.copytree(DEMO / "hostile", repo / "hostile")
    return repo


@pytest.fixture
def tcp_listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.settimeout(0.5)
    yield srv
    srv.close()


def _received_tcp(srv) -> bytes:
    try:
        conn, _ = srv.accept()
    except (TimeoutError, socket.timeout):
        return b""
    with conn:
        conn.settimeout(2)
        return conn.recv(4096)


def test_tcp_exfiltration_refused_and_twin_allowed(tmp_path, tcp_listener, fake_home):
    port = tcp_listener.getsockname()[1]
    repo = hostile_repo(tmp_path, f"python3 -B hostile/exfil_tcp.py 127.0.0.1 {port}",
                        f"net.connect_tcp = [{port}]\n")
    proc, report = run_json(repo, tmp_path, home=fake_home)
    step = by_name(report)["attack"]
    assert proc.returncode == 1 and step["status"] == "failed"
    assert "REFUSED" in step["output_tail"] and _received_tcp(tcp_listener) == b""
    assert f"asked to connect to TCP port {port}; the ceiling does not allow it" in step["narrowings"][0]["text"]

    # Twin: the operator grants the port; the same step now reaches the listener (the key stays
    # unreadable: HOME is still outside the ceiling).
    ceiling = ceiling_file(tmp_path, net={"connect_tcp": [port]})
    proc, report = run_json(repo, tmp_path, "--ceiling", ceiling, home=fake_home)
    assert by_name(report)["attack"]["status"] == "passed", proc.stdout
    got = _received_tcp(tcp_listener)
    assert b"key was unreadable" in got and FAKE_KEY.encode() not in got


def test_udp_exfiltration_refused_and_twin_allowed(tmp_path, fake_home):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as srv:
        srv.bind(("127.0.0.1", 0))
        srv.settimeout(0.5)
        port = srv.getsockname()[1]
        repo = hostile_repo(tmp_path, f"python3 -B hostile/exfil_udp.py 127.0.0.1 {port}", "net.udp = true\n")
        proc, report = run_json(repo, tmp_path, home=fake_home)
        step = by_name(report)["attack"]
        assert step["status"] == "failed" and "EPERM" in step["output_tail"]
        with pytest.raises((TimeoutError, socket.timeout)):
            srv.recv(4096)
        proc, report = run_json(repo, tmp_path, "--ceiling", ceiling_file(tmp_path, net={"udp": True}),
                                home=fake_home)
        assert by_name(report)["attack"]["status"] == "passed", proc.stdout
        assert b"key was unreadable" in srv.recv(4096)


def test_ptrace_refused_and_twin_allowed(tmp_path):
    repo = hostile_repo(tmp_path, "python3 -B hostile/ptrace.py", 'seccomp.allow = ["ptrace"]\n')
    _, report = run_json(repo, tmp_path)
    assert "REFUSED: ptrace(PTRACE_TRACEME): EPERM" in by_name(report)["attack"]["output_tail"]
    ceiling = ceiling_file(tmp_path, seccomp={"allow": ["ptrace"]})
    _, report = run_json(repo, tmp_path, "--ceiling", ceiling)
    assert "ESCAPED: ptrace(PTRACE_TRACEME)" in by_name(report)["attack"]["output_tail"]


def test_widened_write_is_narrowed_and_refused(tmp_path):
    """A step asking to write outside the repo is narrowed, and the write itself is refused;
    with a ceiling that grants the directory, the same write succeeds."""
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "written"
    repo = make_repo(tmp_path, f'''
        [[step]]
        name = "widen"
        run = "echo hi > {target}"
        policy = "p"
        [policy.p]
        version = 1
        fs.read = ["/usr", "/etc", "."]
        fs.exec = ["/usr/bin", "/bin"]
        fs.write = [".", "{outside}"]
        ''')
    proc, report = run_json(repo, tmp_path)
    step = by_name(report)["widen"]
    # Landlock refuses (EACCES), or before it the namespace tier's read-only mount (EROFS)
    assert step["status"] == "failed" and any(
        why in step["output_tail"] for why in ("Permission denied", "Read-only file system"))
    assert f"step widen asked to write {outside}; the ceiling does not allow it" in proc.stdout
    assert not target.exists()
    # the narrowed policy kept the parts that were inside the ceiling
    assert str(repo) in step["effective_policy"]["fs"]["write"]
    fs = dict(ceilings.BUILTIN["fs"], write=["{repo}", "{tmp}", str(outside)])
    _, report = run_json(repo, tmp_path, "--ceiling", ceiling_file(tmp_path, fs=fs))
    assert by_name(report)["widen"]["status"] == "passed" and target.read_text() == "hi\n"


def test_network_domain_is_narrowed_not_a_cage_error(tmp_path):
    repo = make_repo(tmp_path, '[[step]]\nname = "s"\nrun = "true"\npolicy = "p"\n'
                               '[policy.p]\nversion = 1\nnet.domains = ["pypi.org"]\n')
    proc, report = run_json(repo, tmp_path)
    assert proc.returncode == 0
    assert "step s asked for network to pypi.org; the ceiling does not allow it" in proc.stdout


def test_cage_error_is_125(tmp_path):
    # An operator ceiling that grants domains under compat strict, where only the weaker
    # Landlock fallback could enforce them (namespaces forced off): the cage refuses and the
    # gate exits 125 without running the step.
    repo = make_repo(tmp_path, '[[step]]\nname = "s"\nrun = "touch ran"\n')
    ceiling = ceiling_file(tmp_path, net={"domains": ["pypi.org"]}, compat={"landlock": "strict"})
    proc, report = run_json(repo, tmp_path, "--ceiling", ceiling, env={"SANDBOY_NAMESPACES": "0"})
    step = by_name(report)["s"]
    assert proc.returncode == 125 and report["status"] == "cage_error"
    assert step["status"] == "cage_error" and "egress" in step["error"]
    assert not (repo / "ran").exists()


OUTCOMES = [
    # (run, status, returncode, description fragment)
    ("exit 3", "failed", 3, "failed (exit 3)"),
    ("kill -9 $$", "killed", 137, "killed by signal 9"),
    ("kill -TERM $$", "killed", 143, "killed by signal 15"),
    ("exit 0", "passed", 0, "passed"),
]


@pytest.mark.parametrize("run, status, code, words", OUTCOMES)
def test_outcomes_are_explicit(tmp_path, run, status, code, words):
    repo = make_repo(tmp_path, f'[[step]]\nname = "s"\nrun = "{run}"\n')
    junit = tmp_path / "j.xml"
    proc, report = run_json(repo, tmp_path, "--junit", junit)
    step = by_name(report)["s"]
    assert (step["status"], step["returncode"]) == (status, code)
    assert words in step["description"]
    assert proc.returncode == (0 if status == "passed" else 1)
    xml = junit.read_text()
    assert ("<failure" in xml) == (status != "passed")
    if status == "killed":
        assert 'type="killed"' in xml and "KILLED" in proc.stdout and "PASSED" not in proc.stdout


def test_shell_not_found(tmp_path):
    repo = make_repo(tmp_path, '[gate]\nshell = ["no-such-shell-xyz"]\n[[step]]\nname = "s"\nrun = "true"\n')
    proc, report = run_json(repo, tmp_path)
    step = by_name(report)["s"]
    assert proc.returncode == 1 and step["status"] == "failed" and step["returncode"] == 127


def test_stop_at_first_required_failure_and_keep_going(tmp_path):
    gate = '''
        [[step]]
        name = "ok"
        run = "true"
        [[step]]
        name = "tolerated"
        run = "exit 4"
        allow_failure = true
        [[step]]
        name = "broken"
        run = "exit 5"
        [[step]]
        name = "after"
        run = "touch after-ran"
        '''
    repo = make_repo(tmp_path, gate)
    junit = tmp_path / "j.xml"
    proc, report = run_json(repo, tmp_path, "--junit", junit)
    statuses = [s["status"] for s in report["steps"]]
    assert statuses == ["passed", "failed", "failed", "not_run"] and proc.returncode == 1
    assert not (repo / "after-ran").exists() and "<skipped" in junit.read_text()
    proc, report = run_json(repo, tmp_path, "--keep-going")
    assert [s["status"] for s in report["steps"]] == ["passed", "failed", "failed", "passed"]
    assert proc.returncode == 1 and (repo / "after-ran").exists()


ESCAPE = '''
import os, sys, time
# setsid child + double-forked grandchild: both leave the step's process group and session.
# The grandchild renames itself (argv[0] = the marker) so the host can look for it: in a PID
# namespace its pid is the namespace's, not the host's.
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        with open(sys.argv[1], "w") as fh:
            fh.write(str(os.getpid()))
        os.execv(sys.executable, [sys.argv[3], "-c", "import time; time.sleep(300)"])
    os._exit(0)
os.waitpid(pid, 0)
while not os.path.exists(sys.argv[1]) or not open(sys.argv[1]).read():
    time.sleep(0.01)
time.sleep(0.2)  # let the grandchild's exec happen
if sys.argv[2] == "hang":
    time.sleep(300)
'''


@pytest.mark.parametrize("mode, status", [("hang", "timed_out"), ("exit", "passed")])
def test_no_descendant_outlives_its_step(tmp_path, mode, status):
    """A grandchild that called setsid after a double fork is killed at the timeout, and also
    when the step itself finishes normally."""
    marker = f"SBX-{os.getpid()}-{mode}-escape"
    repo = make_repo(tmp_path, f'''
        [[step]]
        name = "escape"
        run = "python3 escape.py escaped.pid {mode} {marker}"
        timeout = 2
        ''', {"escape.py": ESCAPE})
    proc, report = run_json(repo, tmp_path)
    assert by_name(report)["escape"]["status"] == status, proc.stdout
    assert (repo / "escaped.pid").read_text()  # the grandchild did start
    assert survivors(marker) == [], f"{marker} outlived its step"


def test_output_is_sanitized_and_logged(tmp_path):
    repo = make_repo(tmp_path, '''
        [[step]]
        name = "a/../b"
        run = "printf 'x\\\\033[2Jy\\\\rz\\\\n::add-mask::secret\\\\n'; printf 'no newline'"
        ''')
    logs = tmp_path / "logs"
    proc, report = run_json(repo, tmp_path, "--logs", logs)
    assert "[a/../b] x\\x1b[2Jy\\x0dz" in proc.stdout and "\x1b[2J" not in proc.stdout
    assert "\n::add-mask::" not in proc.stdout and "[a/../b] no newline" in proc.stdout
    assert os.listdir(logs) == ["a_.._b.log"]
    assert b"x\x1b[2Jy\rz\n::add-mask::secret\nno newline" in (logs / "a_.._b.log").read_bytes()


def test_json_to_stdout(tmp_path):
    repo = make_repo(tmp_path, '[[step]]\nname = "s"\nrun = "echo hello"\n')
    proc = run_gate(repo, "--json", "-")
    report = json.loads(proc.stdout)
    assert report["exit_code"] == 0 and "[s] hello" in proc.stderr


def test_help_has_examples():
    proc = run_gate("--help")
    assert proc.returncode == 0 and "examples:" in proc.stdout and "exit codes" in proc.stdout


def test_each_step_gets_a_private_empty_tmp(tmp_path):
    """Steps that share a compiled cage still start with an empty {tmp}, found through TMPDIR."""
    repo = make_repo(tmp_path, '''
        [[step]]
        name = "leave"
        run = "echo secret > $TMPDIR/left; mkdir $TMPDIR/d; chmod 000 $TMPDIR; echo $TMPDIR > tmpdir.txt"
        [[step]]
        name = "look"
        run = "test -z \\"$(ls -A $TMPDIR)\\" && python3 -c 'import tempfile; tempfile.NamedTemporaryFile()' && echo clean"
        ''')
    proc, report = run_json(repo, tmp_path)
    assert [s["status"] for s in report["steps"]] == ["passed", "passed"], proc.stdout
    assert "[look] clean" in proc.stdout
    assert not os.path.exists((repo / "tmpdir.txt").read_text().strip())  # removed after the gate


def test_deny_inside_the_repo_sees_files_made_by_earlier_steps(tmp_path):
    """A deny inside a writable directory is expanded per step (no shared cage): what step one
    builds, step two can read, and the denied file stays unreadable. (The cage splits the repo
    root around the deny, so new top-level entries cannot be made there: `dist/` exists.)"""
    repo = make_repo(tmp_path, '''
        [[step]]
        name = "build"
        run = "mkdir dist/sub && echo built > dist/sub/out"
        policy = "p"
        [[step]]
        name = "use"
        run = "cat dist/sub/out; cat .env"
        policy = "p"
        [policy.p]
        version = 1
        fs.read = ["/usr", "/etc", "."]
        fs.exec = ["/usr/bin", "/bin"]
        fs.write = ["."]
        fs.deny = [".env"]
        ''', {".env": "TOKEN=hunter2\n", "dist/README": "build output\n"})
    proc, report = run_json(repo, tmp_path)
    use = by_name(report)["use"]
    assert use["status"] == "failed" and "built" in use["output_tail"]
    assert "Permission denied" in use["output_tail"] and "hunter2" not in proc.stdout


def test_a_path_made_by_one_step_is_granted_to_the_next(tmp_path, fake_home):
    """Compiled cages are shared between steps with the same policy. One built while a granted
    path did not exist yet (so not granted) must not be reused once a later step made it."""
    out = tmp_path / "repo" / "out"
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "before"
        run = "true"
        policy = "reader"

        [[step]]
        name = "build"
        run = "mkdir -p out && echo artefact > out/result.txt"

        [[step]]
        name = "use"
        run = "cat {out}/result.txt"
        policy = "reader"

        [policy.reader]
        version = 1
        fs.read = ["/usr", "/lib", "/lib64", "/etc", "out"]
        fs.exec = ["/usr/bin", "/bin"]
    """)
    proc, report = run_json(repo, tmp_path, home=fake_home)
    steps = by_name(report)
    assert [steps[n]["status"] for n in ("before", "build", "use")] == ["passed"] * 3, proc.stdout + proc.stderr
    assert "artefact" in proc.stdout


def test_a_step_cannot_break_cleanup_of_its_tmp(tmp_path, fake_home):
    """A tree 1,500 levels deep, a FIFO and a locked directory in {tmp}: the next step still
    gets an empty {tmp}, the gate still reports, and nothing is left behind."""
    repo = make_repo(tmp_path, """
        [[step]]
        name = "litter"
        run = '''
            cd "$TMPDIR" && mkfifo pipe && mkdir locked && touch locked/f && chmod 000 locked
            python3 - <<'PY'
        import os
        fd = os.open(".", os.O_RDONLY)
        for _ in range(1500):
            os.mkdir("d", dir_fd=fd)
            fd = os.open("d", os.O_RDONLY, dir_fd=fd)
        PY
            echo TMP=$TMPDIR
        '''

        [[step]]
        name = "next"
        run = 'test -z "$(ls -A "$TMPDIR")" && echo tmp-is-empty'
    """)
    proc, report = run_json(repo, tmp_path, home=fake_home)
    steps = by_name(report)
    assert steps["litter"]["status"] == "passed", proc.stdout + proc.stderr
    assert steps["next"]["status"] == "passed", proc.stdout + proc.stderr
    assert "tmp-is-empty" in proc.stdout
    tmp = next(line.split("TMP=", 1)[1] for line in proc.stdout.splitlines() if "TMP=" in line)
    assert not os.path.exists(tmp.strip())  # removed after the gate


def test_a_process_limit_does_not_outlive_its_step(tmp_path, fake_home):
    """As root, steps share one pids cgroup: a later step without `processes` must not keep
    the earlier step's pids.max."""
    if os.geteuid() != 0:
        pytest.skip("the shared pids cgroup is used as root only")
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(textwrap.dedent("""
        version = 1
        [fs]
        read = ["/usr", "/lib", "/lib64", "/bin", "/etc", "/proc", "/dev", "."]
        exec = ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]
        write = ["."]
    """))
    repo = make_repo(tmp_path, """
        [gate]
        shell = ["bash", "-c"]   # no login shell: /etc/profile would retry fork for 15 s

        [[step]]
        name = "small"
        run = "true"
        policy = "one"
        allow_failure = true

        [[step]]
        name = "build"
        run = "for i in 1 2 3 4 5; do sleep 0.2 & done; wait; echo forked-five"

        [policy.one]
        version = 1
        limits.processes = 1
    """)
    proc, report = run_json(repo, tmp_path, "--ceiling", ceiling, home=fake_home)
    assert by_name(report)["build"]["status"] == "passed", proc.stdout + proc.stderr
    assert "forked-five" in proc.stdout


@pytest.mark.parametrize("flag", ["--logs", "--junit", "--json"])
def test_outputs_inside_what_steps_can_write_are_refused(tmp_path, fake_home, flag):
    """The gate writes its files with the operator's rights after the steps ran; inside the
    repository a step could plant a symlink there (`gate-logs/next.log -> /etc/...`)."""
    victim = tmp_path / "victim.conf"
    victim.write_text("original\n")
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "plant"
        run = "mkdir -p out/logs && ln -s {victim} out/logs/next.log && ln -s {victim} out/gate.xml && ln -s {victim} out/gate.json"

        [[step]]
        name = "next"
        run = "echo attacker-chosen-bytes"
    """)
    target = {"--logs": "out/logs", "--junit": "out/gate.xml", "--json": "out/gate.json"}[flag]
    proc = run_gate(repo, flag, repo / target, home=fake_home)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{flag}: " in proc.stderr and "which the steps can write" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert victim.read_text() == "original\n"
    assert not (repo / "out").exists()  # refused before anything ran


def test_outputs_never_follow_a_planted_symlink(tmp_path, fake_home):
    """Second layer: even outside the repository, a symlink or FIFO at the report path is not
    followed or waited on."""
    victim = tmp_path / "victim.conf"
    victim.write_text("original\n")
    out = tmp_path / "reports"
    out.mkdir()
    (out / "gate.xml").symlink_to(victim)
    os.mkfifo(out / "gate.json")
    repo = make_repo(tmp_path, """
        [[step]]
        name = "unit"
        run = "true"
    """)
    # Found before the first step (gate/outputs.check_writable); open_output's own refusal, for a
    # file planted later, is tested in test_outputs_first.py.
    proc = run_gate(repo, "--junit", out / "gate.xml", home=fake_home, timeout=30)
    assert proc.returncode == 2 and "--junit: " in proc.stderr and "not a regular file" in proc.stderr, proc.stderr
    assert victim.read_text() == "original\n"
    proc = run_gate(repo, "--json", out / "gate.json", home=fake_home, timeout=30)
    assert proc.returncode == 2 and "--json: " in proc.stderr and "not a regular file" in proc.stderr, proc.stderr


def test_terminating_the_gate_ends_the_running_step(tmp_path, fake_home):
    """SIGTERM to the gate (a CI job cancelled) must not leave the step's tree running."""
    import signal
    import subprocess
    import sys

    marker = tmp_path / "repo" / "alive"
    # A name only this test's processes carry: other tests (and other people) run `sleep 300` too.
    escaped = f"SBX-{os.getpid()}-term"
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "long"
        run = "(setsid bash -c 'exec -a {escaped} sleep 300' &) ; echo started; while true; do touch alive; sleep 0.1; done"
    """)
    proc = subprocess.Popen([sys.executable, "-m", "sandboy.gate.cli", str(repo)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, HOME=str(fake_home)))
    deadline = time.monotonic() + 20
    while not (marker.exists() and survivors(escaped)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists()
    assert len(survivors(escaped)) == 1  # the setup worked: the escaped sleep is running
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=20)
    assert proc.returncode == 130
    marker.unlink()
    time.sleep(0.5)
    assert not marker.exists()  # the loop is dead
    assert survivors(escaped) == []  # and so is the process that left the session


def test_a_step_that_closes_its_output_still_times_out(tmp_path, fake_home):
    """End of output is not the end of the step: the deadline holds after EOF too."""
    repo = make_repo(tmp_path, """
        [[step]]
        name = "silent"
        run = "exec >&- 2>&-; sleep 100"
        timeout = 1
    """)
    # No wall-clock assertion (a loaded machine makes them flaky): the status says the deadline
    # ended it, and run_json's own timeout fails the test if the gate hangs.
    proc, report = run_json(repo, tmp_path, home=fake_home, timeout=60)
    assert by_name(report)["silent"]["status"] == "timed_out", proc.stdout + proc.stderr


def test_a_second_stop_signal_during_the_sweep_leaves_nothing(tmp_path, fake_home):
    """^C twice, or SIGINT then SIGTERM from a CI runner, while the gate is killing a big tree:
    every process still dies and the report is still written."""
    import signal
    import subprocess
    import sys

    marker = f"SBX-{os.getpid()}-storm"
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "storm"
        run = "for i in $(seq 300); do (setsid bash -c 'exec -a {marker} sleep 300' &) ; done; echo ready; sleep 300"
    """)
    report = tmp_path / "report.json"
    proc = subprocess.Popen([sys.executable, "-m", "sandboy.gate.cli", str(repo), "--json", str(report)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, HOME=str(fake_home)))
    try:
        deadline = time.monotonic() + 30
        while len(survivors(marker)) < 250 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(survivors(marker)) >= 250, "the setup: a big tree is running when the signals come"
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        assert proc.returncode == 130
        assert survivors(marker) == []
        assert json.loads(report.read_text())["steps"][0]["status"] == "killed"
    finally:
        kill_survivors(marker)


def test_stop_signals_until_the_gate_exits_never_end_it_by_the_signal(tmp_path, fake_home):
    """SIGTERM sent again and again until the gate has exited (a CI runner's follow-ups, ^C held
    down): every one lands while the gate stops, writes its report — or exits, where the
    interpreter's exit puts SIG_DFL back on Python's handlers. One landing there ended a gate
    that had decided 130 by SIGTERM instead (rc -15, seen under load in
    test_a_second_stop_signal_during_the_sweep_leaves_nothing); the status must stay 130."""
    import signal
    import subprocess
    import sys

    marker = f"SBX-{os.getpid()}-stormexit"
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "waits"
        run = "(exec -a {marker} sleep 300) & echo ready; wait"
    """)
    codes = []
    try:
        for _ in range(6):
            report = tmp_path / "report.json"
            report.unlink(missing_ok=True)
            proc = subprocess.Popen([sys.executable, "-m", "sandboy.gate.cli", str(repo), "--json", str(report)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    env=dict(os.environ, HOME=str(fake_home)))
            deadline = time.monotonic() + 30
            while not survivors(marker) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert survivors(marker), "the setup: the step is running when the signals come"
            while proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    break
                time.sleep(0.0005)
            codes.append(proc.wait(timeout=60))
            assert survivors(marker) == []
            assert json.loads(report.read_text())["steps"][0]["status"] == "killed"
        assert codes == [130] * len(codes)
    finally:
        kill_survivors(marker)


def test_a_big_tree_is_swept_quickly_at_the_timeout(tmp_path, fake_home):
    marker = f"SBX-{os.getpid()}-many"
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(textwrap.dedent("""
        version = 1
        [fs]
        read = ["/usr", "/lib", "/lib64", "/bin", "/etc", "/proc", "/dev", "."]
        exec = ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]
        write = ["."]
    """))
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "many"
        run = "for i in $(seq 1500); do (exec -a {marker} sleep 300) & done; echo spawned $(pgrep -c -f ^{marker}); sleep 300"
        timeout = 30
    """)
    # 30 s, not 10: at load 10 on two cores the 1,500 forks and execs took longer than 10 s and
    # the step was killed before it said "spawned" (session 14's preliminary CI).
    # No wall-clock assertion (flaky on a loaded machine; the sweep's cost belongs in bench/):
    # run_json's timeout fails the test if the sweep hangs or goes quadratic again.
    proc, report = run_json(repo, tmp_path, "--ceiling", ceiling, home=fake_home, timeout=120)
    step = by_name(report)["many"]
    assert step["status"] == "timed_out", proc.stdout + proc.stderr
    spawned = [int(line.split()[-1]) for line in step["output_tail"].splitlines() if line.startswith("spawned ")]
    assert spawned and spawned[0] >= 1000, step["output_tail"][-500:]  # the setup: a big tree existed
    assert survivors(marker) == []
