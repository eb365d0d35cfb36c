"""The bundled hostile repository, run for real: the honest step passes, every attack is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from gatekit import DEMO, FAKE_KEY, by_name, run_gate

from sandboy.confine import namespaces

# Under the namespace tier every mount outside the write roots is read-only: a write there gets
# EROFS before Landlock's EACCES (tests/cage/test_namespaces.py; Landlock alone: SANDBOY_NAMESPACES=0).
OUTSIDE = "EROFS" if namespaces.availability()[0] else "EACCES"

HOSTILE = {
    # step: (status, words that must appear in its output)
    "steal-key": ("failed", ["key file exists: True", "REFUSED: read", "id_ed25519: EACCES",
                             "REFUSED: read /etc/shadow: EACCES"]),
    "write-outside": ("failed", ["REFUSED: write", f".bashrc: {OUTSIDE}", f"/tmp/gate-demo-pwned: {OUTSIDE}"]),
    "exfil-tcp": ("failed", ["REFUSED: connect to 127.0.0.1:9419 over TCP: EPERM"]),
    "exfil-udp": ("failed", ["REFUSED: open a UDP socket to 127.0.0.1:9419: EPERM"]),
    "ptrace": ("failed", ["REFUSED: ptrace(PTRACE_ATTACH)", "EPERM", "REFUSED: ptrace(PTRACE_TRACEME): EPERM"]),
    "fork-bomb": ("failed", ["REFUSED: fork without end: EAGAIN"]),
    "endless-loop": ("timed_out", ["spinning forever"]),
    "fetch": ("failed", ["REFUSED: connect to port 443", "EPERM"]),
}

NARROWED = {
    "steal-key": "asked to read {home}; the ceiling allows read only on",  # the checkout, beneath it
    "write-outside": "asked to write /; the ceiling allows write only on",
    "exfil-tcp": "asked to connect to TCP port 9419; the ceiling does not allow it",
    "exfil-udp": "asked for UDP sockets; the ceiling does not allow it",
    "ptrace": "asked to allow system call ptrace; the ceiling does not allow it",
    "fork-bomb": "asked for limits.processes = 100000; the ceiling caps it at 512",
    "fetch": "asked for network to example.com; the ceiling does not allow it",
}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("demo")
    home = base / "home"
    # Checked out under the operator's home, where the hostile steps look for the key.
    repo = home / "src" / "gate-demo"
    shutil.copytree(DEMO, repo)
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "id_ed25519").write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{FAKE_KEY}\n")
    summary = base / "summary.md"
    proc = run_gate(repo, "--json", base / "r.json", "--junit", base / "r.xml", "--logs", base / "logs",
                    home=home, env={"GITHUB_STEP_SUMMARY": str(summary)})
    return {"proc": proc, "repo": repo, "home": home, "base": base, "summary": summary,
            "report": json.loads((base / "r.json").read_text())}


def test_demo_gate_passes_overall(demo_run):
    proc = demo_run["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "gate passed (exit 0)" in proc.stdout


def test_honest_step_passes(demo_run):
    unit = by_name(demo_run["report"])["unit"]
    assert unit["status"] == "passed" and unit["returncode"] == 0
    assert "Ran 3 tests" in unit["output_tail"] and "OK" in unit["output_tail"]
    assert unit["narrowings"] == []


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_step_refused(demo_run, name):
    status, words = HOSTILE[name]
    step = by_name(demo_run["report"])[name]
    assert step["status"] == status, step["description"] + step["output_tail"]
    assert step["returncode"] != 0
    out = step["output_tail"]
    assert "ESCAPED" not in out and "BREACH" not in out
    for word in words:
        assert word in out, out
    # the live stream shows the same, prefixed with the step
    assert f"[{name}] " in demo_run["proc"].stdout
    log = Path(step["log"]).read_text()
    assert log.endswith(out[-200:])


@pytest.mark.parametrize("name", sorted(NARROWED))
def test_hostile_step_narrowing_reported(demo_run, name):
    expected = NARROWED[name].replace("{home}", str(demo_run["home"]))
    texts = [n["text"] for n in by_name(demo_run["report"])[name]["narrowings"]]
    assert any(expected in t for t in texts), texts
    assert f"!! step {name} {expected}" in demo_run["proc"].stdout


def test_nothing_leaked(demo_run):
    everything = demo_run["proc"].stdout + json.dumps(demo_run["report"])
    assert FAKE_KEY not in everything
    assert not (demo_run["home"] / ".bashrc").exists()
    assert not Path("/tmp/gate-demo-pwned").exists()
    assert not (demo_run["repo"].parent / "gate-demo-pwned").exists()


def test_timed_out_step_is_explicit(demo_run):
    step = by_name(demo_run["report"])["endless-loop"]
    assert step["returncode"] == 137 and step["timeout"] == 2
    assert "timed out after 2s" in step["description"]
    assert "TIMED OUT (allowed)" in demo_run["proc"].stdout


def test_reports_validate(demo_run):
    import jsonschema
    import xmlschema

    schema = json.loads((Path(__file__).parents[2] / "src/sandboy/gate/report.schema.json").read_text())
    jsonschema.validate(demo_run["report"], schema)
    xsd = xmlschema.XMLSchema(str(Path(__file__).with_name("junit.xsd")))
    xml = demo_run["base"] / "r.xml"
    xsd.validate(str(xml))
    text = xml.read_text()
    # the hostile steps are allowed to fail: a dashboard must not count them as failures
    assert text.count("<testcase ") == 9 and text.count("<failure ") == 0 and 'failures="0"' in text
    assert text.count('<skipped message="allowed failure (') == 8
    assert 'allowed failure (timed_out): timed out after 2s' in text


def test_markdown_summary(demo_run):
    md = demo_run["summary"].read_text()
    assert md.startswith("### sandboy gate: passed (exit 0)")
    assert "| unit | ✅ PASSED |" in md and "TIMED OUT (allowed)" in md
    assert "asked for network to example.com" in md
