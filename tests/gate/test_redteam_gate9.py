"""Session 9 review of the gate from the side of the untrusted repository (its `.007/gate.toml`,
its step policies, what its steps print and leave behind). Each hole found has a probe here (and
a twin proving the legitimate use still works); docs/threat-model.md, "Session 9 review
(repository input)", lists what was tried and held."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from gatekit import by_name, kill_survivors, make_repo, run_gate, run_json

HUGE = "9" * 5000  # beyond Python's 4,300-digit int() limit


def test_a_timeout_of_thousands_of_digits_is_a_gate_error_not_a_traceback(tmp_path, fake_home):
    # int() of a 5,000-digit string raises ValueError: the gate ended in a traceback with exit 1,
    # which CI reads as "a step failed", with no --json report at all
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "s"
        run = "true"
        timeout = "{HUGE}s"
    """)
    report = tmp_path / "r.json"
    proc = run_gate(repo, "--json", report, home=fake_home)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    assert "gate.toml: step[0] ('s').timeout: expected a timeout between 1 second and 7 days" in proc.stderr
    assert len(proc.stderr) < 1000  # the value is not echoed whole
    assert report.exists()


def test_twin_a_timeout_in_minutes_runs(tmp_path, fake_home):
    repo = make_repo(tmp_path, """
        [[step]]
        name = "s"
        run = "true"
        timeout = "10m"
    """)
    proc, report = run_json(repo, tmp_path, home=fake_home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert by_name(report)["s"]["timeout"] == 600


def test_a_ceiling_budget_of_thousands_of_digits_is_a_usage_error(tmp_path, fake_home):
    repo = make_repo(tmp_path, '[[step]]\nname = "s"\nrun = "true"\n')
    printed = run_gate(repo, "--print-ceiling").stdout  # the built-in ceiling, budget = "6h"
    assert 'budget = "6h"' in printed
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(printed.replace('budget = "6h"', f'budget = "{HUGE}m"'))
    proc = run_gate(repo, "--ceiling", ceiling, home=fake_home)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2
    assert "gate.budget: expected a duration from 0 (no budget) to 30 days" in proc.stderr
    ceiling.write_text(printed.replace('budget = "6h"', 'budget = "30m"'))  # twin
    twin = run_gate(repo, "--ceiling", ceiling, home=fake_home)
    assert twin.returncode == 0, twin.stdout + twin.stderr


def _parse_junit(path):
    import xml.etree.ElementTree as ET

    import xmlschema

    from gatekit import ROOT

    xmlschema.XMLSchema(str(ROOT / "tests" / "gate" / "junit.xsd")).validate(str(path))
    return ET.parse(path)


def test_a_step_printing_xml_noncharacters_leaves_a_readable_junit_report(tmp_path, fake_home):
    # U+FFFE / U+FFFF are not XML characters: printed by a step (or quoted from a step policy's
    # path in a narrowing), they made the JUnit file "not well-formed" for every CI reader
    repo = make_repo(tmp_path, r"""
        [[step]]
        name = "noisy"
        run = "printf 'before \\357\\277\\276 \\357\\277\\277 after\\n'; exit 3"
        policy = "p"

        [policy.p]
        version = 1
        fs.read = ["/usr", "/lib", "/lib64", "/bin", "/etc", "."]
        fs.exec = ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]
        fs.write = ["/x\uffff"]
    """)
    junit = tmp_path / "junit.xml"
    proc = run_gate(repo, "--junit", junit, home=fake_home)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    raw = junit.read_bytes()
    assert b"\xef\xbf\xbe" not in raw and b"\xef\xbf\xbf" not in raw
    tree = _parse_junit(junit)
    text = "".join(e.text or "" for e in tree.iter("system-out"))
    assert "before \\ufffe \\uffff after" in text  # shown escaped, not dropped
    assert "x\\uffff" in text  # the narrowing that quotes the path
    assert tree.find(".//failure") is not None  # still reads as the failure it was


def test_twin_ordinary_non_ascii_output_is_kept_as_it_is_in_junit(tmp_path, fake_home):
    repo = make_repo(tmp_path, r"""
        [[step]]
        name = "s"
        run = "printf 'caf\\303\\251 \\342\\234\\223 \\360\\237\\231\\202\\n'"
    """)
    junit = tmp_path / "junit.xml"
    proc = run_gate(repo, "--junit", junit, home=fake_home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = "".join(e.text or "" for e in _parse_junit(junit).iter("system-out"))
    assert "café ✓ 🙂" in text


def _console_tail(stdout: str, name: str) -> list:
    """The step's output lines the console showed when the step ended (its tail)."""
    marker = f"step {name}: "
    lines = stdout.splitlines()
    at = next(i for i, text in enumerate(lines) if text.startswith(f"!! {marker}") and "lines follow" in text)
    return [text for text in lines[at + 1:] if text.startswith(f"[{name}] ")]


def test_a_step_printing_empty_lines_gets_a_tail_of_bounded_lines_not_millions(tmp_path, fake_home):
    # Each console line held for the tail cost the gate a tuple and a bytes object (≈ 100 bytes,
    # outside the step's memory cgroup) and a render + write when the step ended: `yes ''` under
    # the default cap held 3.4 million lines, 333 MB of the gate, and the gate ran 36 s past
    # `--budget 90` rendering them. Scaled down: a 1 MiB cap (512 KiB tail).
    from sandboy.gate.capture import HELD_LINE_COST

    repo = make_repo(tmp_path, """
        [[step]]
        name = "s"
        run = "yes '' | head -n 400000; echo LAST"
    """)
    proc = run_gate(repo, "--max-step-output", "1M", home=fake_home, timeout=300)
    assert proc.returncode == 0, proc.stderr
    tail = _console_tail(proc.stdout, "s")
    assert tail[-1] == "[s] LAST"
    # before: 512 KiB / 5 characters a line = 104,857 lines held and shown
    assert len(tail) <= (512 << 10) // HELD_LINE_COST + 1, len(tail)
    assert "lines (about " in proc.stdout  # the dropped lines still said, in characters as printed
    dropped = int(proc.stdout.split("lines (about ")[1].split(" characters")[0].replace(",", ""))
    assert dropped < 400_000 * 5  # counted as printed (5 a line), not as charged


def test_twin_long_lines_still_get_a_tail_of_the_caps_characters(tmp_path, fake_home):
    repo = make_repo(tmp_path, """
        [[step]]
        name = "s"
        run = "yes xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx | head -n 20000; echo LAST"
    """)
    proc = run_gate(repo, "--max-step-output", "1M", home=fake_home, timeout=300)
    assert proc.returncode == 0, proc.stderr
    tail = _console_tail(proc.stdout, "s")
    assert tail[-1] == "[s] LAST"
    assert sum(len(text) + 1 for text in tail) >= 0.9 * (512 << 10)  # as before: the tail's characters


FILLER = r"""
    [[step]]
    name = "s"
    run = "(exec -a {marker} sleep 300) & echo $! > leftover.pid; head -c 400000 /dev/zero | tr '\\000' x; echo; sleep 2; echo END"
"""


@pytest.mark.parametrize("namespaces", ["1", "0"], ids=["tier", "forced-off"])
def test_a_step_filling_the_logs_file_system_does_not_unwind_the_gate(tmp_path, fake_home, namespaces):
    # A step may fill the file system its write root shares with --logs (a CI runner's workspace
    # and $RUNNER_TEMP). The log write's ENOSPC unwound the gate out of its pump: exit 2 ("policy
    # error") within 2 s, only an error --json, and without the namespace tier the step's
    # background process outlived the gate. Here --logs is a 256 KiB tmpfs in a private mount
    # namespace (never the host's mounts) and the step prints 400 kB.
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) for a private tmpfs")
    marker = f"ri9-left-{os.urandom(4).hex()}"
    repo = make_repo(tmp_path, FILLER.format(marker=marker))
    logs, report = tmp_path / "logs", tmp_path / "report.json"
    logs.mkdir()
    environ = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    environ.update(HOME=str(fake_home), SANDBOY_NAMESPACES=namespaces)
    script = 'mount -t tmpfs -o size=256k tmpfs "$1" && shift && exec "$@"'
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(logs),
                           sys.executable, "-m", "sandboy.gate.cli", str(repo), "--logs", str(logs / "l"),
                           "--json", str(report)], capture_output=True, text=True, env=environ, timeout=120)
    # by its unique name, not by `$!`: under the tier that is a pid of the step's own PID namespace
    alive = kill_survivors(marker)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert not alive, "the step's background process outlived the gate"
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    assert "step s: its log could not be written (No space left on device)" in proc.stdout
    step = by_name(json.loads(report.read_text()))["s"]
    assert step["status"] == "passed" and step["output_tail"].endswith("END\n")


def test_twin_a_log_with_room_keeps_every_byte(tmp_path, fake_home):
    repo = make_repo(tmp_path, FILLER.format(marker=f"ri9-left-{os.urandom(4).hex()}"))
    proc = run_gate(repo, "--logs", tmp_path / "logs", home=fake_home)
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "logs" / "s.log").read_bytes()
    assert log == b"x" * 400000 + b"\nEND\n"
    assert "could not be written" not in proc.stdout


def test_a_step_asking_for_thousands_of_paths_cannot_push_the_summary_over_githubs_limit(tmp_path, fake_home):
    # GitHub drops a step summary over 1 MiB whole, results table included; one step policy asking
    # for 20,000 paths the ceiling does not grant wrote 1.9 MB of narrowings into it
    paths = ", ".join(f'"/opt/ri9-nothing/{i:05d}-padding-padding-padding"' for i in range(20000))
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "greedy"
        run = "true"
        policy = "p"
        [[step]]
        name = "after"
        run = "exit 3"
        [policy.p]
        version = 1
        fs.read = [{paths}]
    """)
    summary = tmp_path / "summary.md"
    summary.write_text("operator's own line\n")
    proc = run_gate(repo, "--keep-going", home=fake_home, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert proc.returncode == 1, proc.stderr
    text = summary.read_text()
    assert len(text.encode()) < 1 << 20, len(text.encode())
    assert text.startswith("operator's own line\n")
    assert "| greedy |" in text and "| after | ❌ FAILED | 3 |" in text  # the table whole, first
    assert "more line(s) of this summary left out" in text.splitlines()[-1]


def test_twin_an_ordinary_summary_is_whole(tmp_path, fake_home):
    repo = make_repo(tmp_path, """
        [[step]]
        name = "one"
        run = "true"
        policy = "p"
        [policy.p]
        version = 1
        net.connect_tcp = [443]
    """)
    summary = tmp_path / "summary.md"
    proc = run_gate(repo, home=fake_home, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert proc.returncode == 0, proc.stderr
    text = summary.read_text()
    assert "| one | ✅ PASSED | 0 |" in text
    assert "- step one asked to connect to TCP port 443; the ceiling does not allow it" in text
    assert "left out" not in text


def test_a_repositorys_large_policy_files_are_not_copied_into_the_operators_cache(tmp_path, fake_home):
    # The policy parse cache stores each file's bytes: 50 step policy files of 1 MiB (comments
    # cost nothing against the gate's policy budget) wrote 50 MB into ~/.cache/sandboy in one run
    cache = tmp_path / "cache"
    pad = "#" + "x" * 1000 + "\n"
    files = {f".007/p{i}.toml": "version = 1\n" + pad * 200 for i in range(5)}  # 200 kB each
    files[".007/small.toml"] = "version = 1\n[net]\nconnect_tcp = [443]\n"
    steps = "".join(f'[[step]]\nname = "s{i}"\nrun = "true"\npolicy = "p{i}.toml"\n' for i in range(5))
    repo = make_repo(tmp_path, steps + '[[step]]\nname = "small"\nrun = "true"\npolicy = "small.toml"\n', files)
    proc = run_gate(repo, home=fake_home, env={"SANDBOY_CACHE_DIR": str(cache)})
    assert proc.returncode == 0, proc.stderr
    entries = {p.name: p.stat().st_size for p in (cache / "policies").iterdir()}
    assert sum(entries.values()) < 64 << 10, entries  # was 1 MB: five copies of 200 kB
    # twin: the small policy file (and gate.toml) are still cached, and a second run uses them
    assert len(entries) >= 2
    again = run_gate(repo, home=fake_home, env={"SANDBOY_CACHE_DIR": str(cache)})
    assert again.returncode == 0 and "PASSED" in again.stdout


def _comment_policies(count: int) -> tuple:
    pad = "#" + "x" * 1000 + "\n"
    files = {f".007/p{i}.toml": "version = 1\n" + pad * 1040 for i in range(count)}  # ~1 MiB each
    steps = "".join(f'[[step]]\nname = "s{i}"\nrun = "echo ran-{i}"\npolicy = "p{i}.toml"\n' for i in range(count))
    return steps, files


def test_megabytes_of_step_policy_files_are_refused_before_the_budget_would_start(tmp_path, fake_home):
    # All step policy files are read and parsed before the operator's budget starts, and comments
    # weigh nothing against the gate's policy budget (entries, characters): 200 files of 1 MiB
    # held the gate 13 s before its first step under --budget 1
    steps, files = _comment_policies(40)
    repo = make_repo(tmp_path, steps, files)
    proc = run_gate(repo, "--budget", "1", home=fake_home)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "gate.toml: step[3" in proc.stderr and "the step policy files named so far hold" in proc.stderr
    assert "ran-" not in proc.stdout  # nothing ran


def test_twin_a_few_large_policy_files_still_run(tmp_path, fake_home):
    steps, files = _comment_policies(3)
    repo = make_repo(tmp_path, steps, files)
    proc = run_gate(repo, home=fake_home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(f"ran-{i}" in proc.stdout for i in range(3))


ENCODING_GATE = r"""
    [[step]]
    name = "s"
    run = "(exec -a {marker} sleep 300) & echo $! > leftover.pid; printf 'caf\\303\\251 \\342\\234\\223\\n'; sleep 1; echo END"
"""


@pytest.mark.parametrize("namespaces", ["1", "0"], ids=["tier", "forced-off"])
def test_a_character_the_consoles_encoding_lacks_does_not_unwind_the_gate(tmp_path, fake_home, namespaces):
    # Under a Latin-1 locale (here PYTHONIOENCODING) a step printing "✓" raised UnicodeEncodeError
    # in the console: a traceback, exit 1, no reports, and without the namespace tier the step's
    # background process outlived the gate
    marker = f"ri9-enc-{os.urandom(4).hex()}"
    repo = make_repo(tmp_path, ENCODING_GATE.format(marker=marker))
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "sandboy.gate.cli", str(repo), "--json", str(report)],
                          capture_output=True, env={**os.environ, "HOME": str(fake_home),
                                                    "PYTHONIOENCODING": "latin-1", "SANDBOY_NAMESPACES": namespaces},
                          timeout=120)
    # by its unique name, not by `$!`: under the tier that is a pid of the step's own PID namespace
    alive = kill_survivors(marker)
    assert b"Traceback" not in proc.stderr, proc.stderr.decode(errors="replace")
    assert not alive, "the step's background process outlived the gate"
    assert proc.returncode == 0
    assert "[s] café \\u2713" in proc.stdout.decode("latin-1")  # é in Latin-1, ✓ as its escape
    assert by_name(json.loads(report.read_text()))["s"]["status"] == "passed"


def test_twin_a_utf8_console_shows_the_characters(tmp_path, fake_home):
    repo = make_repo(tmp_path, ENCODING_GATE.format(marker=f"ri9-enc-{os.urandom(4).hex()}"))
    proc = run_gate(repo, home=fake_home, env={"PYTHONIOENCODING": "utf-8"})
    assert proc.returncode == 0, proc.stderr
    assert "[s] café ✓" in proc.stdout
