"""A step's output is capped in the log and on the console, head and tail kept, and the reports
say how much was dropped (issue 8, item 3). Checked from the outside: bytes on disk, bytes on
the console, the JSON/JUnit/summary reports.

The attack: two 5-second steps (`yes`, `tr < /dev/zero`) wrote a 90 MB log and 106 MB to the
console — 18 MB/s each, for up to the hour the built-in ceiling allows."""

from __future__ import annotations

import json

from gatekit import by_name, make_repo, run_gate

CAP = 64 * 1024


def test_flooding_steps_are_capped_head_and_tail(tmp_path, fake_home):
    repo = make_repo(tmp_path, """
        [[step]]
        name = "yes"
        run = "echo FIRST-LINE; timeout 3 yes; echo LAST-LINE"
        [[step]]
        name = "zero"
        run = "echo FIRST; timeout 2 tr '\\\\000' x < /dev/zero; echo; echo LAST"
    """)
    out = tmp_path / "out"
    out.mkdir()
    report, junit, summary, logs = out / "r.json", out / "j.xml", out / "s.md", out / "logs"
    proc = run_gate(repo, "--max-step-output", "64K", "--logs", logs, "--json", report, "--junit", junit,
                    home=fake_home, env={"GITHUB_STEP_SUMMARY": str(summary)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    steps = by_name(json.loads(report.read_text()))
    for name, first, last in (("yes", b"FIRST-LINE\n", b"LAST-LINE\n"), ("zero", b"FIRST\n", b"\nLAST\n")):
        step = steps[name]
        log = (logs / f"{name}.log").read_bytes()
        # bytes on disk: the cap plus one marker line, whatever the step wrote
        assert step["output_bytes"] > 4 * CAP, step["output_bytes"]
        assert len(log) <= CAP + 200, len(log)
        assert log.startswith(first) and log.endswith(last)  # head and tail kept
        assert b"bytes of output dropped here (--max-step-output)" in log
        assert step["output_dropped"] == step["output_bytes"] - CAP  # what is missing, exactly
        assert f"output truncated: {step['output_dropped']:,} of {step['output_bytes']:,} bytes dropped" in proc.stdout
    # the console: bounded too (two steps, head and tail each, plus the gate's own lines)
    assert len(proc.stdout.encode()) <= 2 * CAP + 8192, len(proc.stdout.encode())
    assert "[yes] FIRST-LINE" in proc.stdout and "[yes] LAST-LINE" in proc.stdout and "[zero] LAST" in proc.stdout
    assert "output truncated" in junit.read_text() and "output truncated" in summary.read_text()


def test_default_cap_is_32_mib(tmp_path, fake_home):
    total = 40_000_000
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "big"
        run = "head -c {total} /dev/zero | tr '\\\\000' x; echo; echo END"
    """)
    out = tmp_path / "out"
    out.mkdir()
    proc = run_gate(repo, "--logs", out / "logs", "--json", out / "r.json", home=fake_home, timeout=300)
    assert proc.returncode == 0, proc.stderr
    step = by_name(json.loads((out / "r.json").read_text()))["big"]
    assert step["output_bytes"] == total + 5
    assert step["output_dropped"] == total + 5 - (32 << 20)
    assert (out / "logs" / "big.log").stat().st_size <= (32 << 20) + 200
    assert len(proc.stdout.encode()) <= (32 << 20) + 8192


def test_twin_small_output_is_kept_whole(tmp_path, fake_home):
    repo = make_repo(tmp_path, """
        [[step]]
        name = "small"
        run = "seq 1 20000"
    """)
    out = tmp_path / "out"
    out.mkdir()
    proc = run_gate(repo, "--max-step-output", "256K", "--logs", out / "logs", "--json", out / "r.json", home=fake_home)
    assert proc.returncode == 0
    expected = "".join(f"{i}\n" for i in range(1, 20001)).encode()
    assert (out / "logs" / "small.log").read_bytes() == expected
    step = by_name(json.loads((out / "r.json").read_text()))["small"]
    assert step["output_bytes"] == len(expected) and step["output_dropped"] == 0
    assert "[small] 20000" in proc.stdout and "truncated" not in proc.stdout


def test_bad_size_is_a_usage_error(tmp_path):
    repo = make_repo(tmp_path, """
        [[step]]
        name = "s"
        run = "true"
    """)
    proc = run_gate(repo, "--max-step-output", "lots")
    assert proc.returncode == 2 and "expected a size" in proc.stderr


# --- the head-and-tail buffer itself (gate.capture.HeadTail), which both caps share ---------------

def test_head_tail_bytes_cut_a_chunk_at_the_head_and_keep_the_last_bytes():
    from sandboy.gate.capture import HeadTail

    cap = HeadTail(10)  # a head of 5 bytes, a tail of 5
    assert cap.take_bytes(b"abc") == b"abc"
    assert cap.take_bytes(b"defgh") == b"de"       # cut: the head is full after "e"
    assert cap.take_bytes(b"") == b""
    assert cap.take_bytes(b"ijklmnop") == b""      # all held for the tail
    assert cap.dropped_by_now == 6                 # "fghijklmnop" held, 5 of it fits the tail
    assert cap.tail_bytes() == b"lmnop"
    assert (cap.dropped, cap.dropped_by_now) == (6, 6)
    assert cap.tail_bytes() == b""                 # released once


def test_head_tail_items_keep_whole_items_measured_once_rendered():
    from sandboy.gate.capture import HeadTail

    cap = HeadTail(20)  # a head of 10 characters, a tail of 10
    assert cap.take("0123456789", 10) is True
    assert cap.take(b"ab", 1) is False             # held raw with an estimate, rendered later
    assert cap.take(b"cdef", 1) is False
    assert cap.take(b"ghijkl", 1) is False
    lines = cap.tail_items(render=lambda raw: raw.decode().upper(), size=lambda text: len(text) + 1)
    assert lines == ["GHIJKL"]                     # "AB", "CDEF" (8 with newlines) dropped whole
    assert (cap.dropped, cap.dropped_items) == (8, 2)


def test_the_cli_default_is_the_runners():
    import argparse

    from sandboy.gate import cli
    from sandboy.gate.capture import DEFAULT_MAX_STEP_OUTPUT

    parser = argparse.ArgumentParser()
    cli.configure(parser)
    action = next(a for a in parser._actions if a.dest == "max_step_output")
    assert action.default is None  # run_command then passes DEFAULT_MAX_STEP_OUTPUT
    assert f"default {DEFAULT_MAX_STEP_OUTPUT >> 20}M" in action.help


def test_all_steps_together_keep_at_most_eight_times_the_step_cap(tmp_path, fake_home):
    """Session 7: the cap was per step only, so 1,000 steps of `yes | head -c 32M` wrote 32 GB of
    logs and console. Scaled down (--max-step-output 256K, 12 steps of 256 KiB): the first eight
    keep everything, the rest keep 64 KiB each (head and tail), every report says so."""
    from sandboy.gate.capture import GATE_OUTPUT_FACTOR, STEP_OUTPUT_FLOOR

    cap, steps = 256 * 1024, 12
    gate = "".join(f'[[step]]\nname = "s{i}"\nrun = "echo FIRST-{i}; yes | head -c {cap - 200}; echo LAST-{i}"\n'
                   for i in range(steps))
    repo = make_repo(tmp_path, gate)
    out = tmp_path / "out"
    out.mkdir()
    proc = run_gate(repo, "--max-step-output", "256K", "--logs", out / "logs", "--json", out / "r.json",
                    home=fake_home, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = by_name(json.loads((out / "r.json").read_text()))
    logs = {i: (out / "logs" / f"s{i}.log").read_bytes() for i in range(steps)}
    for i in range(steps):
        assert logs[i].startswith(f"FIRST-{i}\n".encode()) and logs[i].endswith(f"LAST-{i}\n".encode())
        if i < GATE_OUTPUT_FACTOR:  # twin: within the gate's total, byte for byte
            assert report[f"s{i}"]["output_dropped"] == 0 and len(logs[i]) == report[f"s{i}"]["output_bytes"]
        else:
            assert report[f"s{i}"]["output_dropped"] == report[f"s{i}"]["output_bytes"] - STEP_OUTPUT_FLOOR
            assert len(logs[i]) <= STEP_OUTPUT_FLOOR + 200
    total = sum(len(log) for log in logs.values())
    assert total <= GATE_OUTPUT_FACTOR * cap + (steps - GATE_OUTPUT_FACTOR) * (STEP_OUTPUT_FLOOR + 200), total
    assert len(proc.stdout.encode()) <= GATE_OUTPUT_FACTOR * cap + steps * (STEP_OUTPUT_FLOOR + 8192)
    assert f"{GATE_OUTPUT_FACTOR}x it for all steps together" in proc.stdout
