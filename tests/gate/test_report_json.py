"""The `--json` report is the compact `json.dumps` encoding, byte for byte, although the gate
encodes the objects its steps share (effective policy, enforced rules) once (`report.dumps`)."""

import json

from gatekit import by_name, make_repo, run_gate

from sandboy.gate.report import dumps

COMPACT = {"separators": (",", ":")}


def test_the_gates_report_is_byte_for_byte_the_compact_json_encoding(tmp_path, fake_home):
    outside = tmp_path / "outside"
    outside.mkdir()
    repo = make_repo(tmp_path, f'''
        [[step]]
        name = "first"
        run = "echo 'caf\u00e9 \\"quoted\\" \\\\ done'"
        [[step]]
        name = "own policy, narrowed"
        run = "exit 3"
        allow_failure = true
        policy = "p"
        [[step]]
        name = "second with the ceiling"
        run = "printf 'no newline'"
        [policy.p]
        version = 1
        fs.read = ["/usr", "/etc", "."]
        fs.exec = ["/usr/bin", "/bin"]
        fs.write = [".", "{outside}"]
        ''')
    report = tmp_path / "report.json"
    proc = run_gate(repo, "--json", report, home=fake_home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    written = report.read_bytes()
    data = json.loads(written)
    steps = by_name(data)
    assert [s["status"] for s in data["steps"]] == ["passed", "failed", "passed"]
    assert steps["own policy, narrowed"]["effective_policy"] != steps["first"]["effective_policy"]
    assert steps["second with the ceiling"]["effective_policy"] == steps["first"]["effective_policy"]
    assert written == (json.dumps(data, **COMPACT) + "\n").encode()


def test_dumps_encodes_shared_objects_once_and_gives_the_same_text():
    policy = {"fs": {"read": ["/usr", "caf\u00e9"], "write": []}, "limits": {"wall_seconds": 1.5}}
    enforced = {"landlock": {"abi": 7, "rules": [["/usr", "read"]] * 3}, "seccomp": None}
    other = {"fs": {"read": ["/"]}}
    steps = []
    for i, (pol, enf) in enumerate([(policy, enforced), (other, enforced), (policy, {}), (None, enforced)]):
        steps.append({"name": f"s{i} \"\\\n\x00", "status": "passed", "duration": 0.1 * i,
                      "effective_policy": pol, "enforced": enf, "degraded": [], "egress": None})
    data = {"version": 1, "tool": "sandboy gate", "started": 1.7e9, "steps": steps}
    assert dumps(data) == json.dumps(data, **COMPACT)
    # the shared keys first or last in a step, a report with no step, and keys after "steps"
    edge = {"steps": [{"enforced": enforced}, {"effective_policy": policy, "name": "x"}, {}]}
    assert dumps(edge) == json.dumps(edge, **COMPACT)
    assert dumps({"version": 1, "steps": []}) == json.dumps({"version": 1, "steps": []}, **COMPACT)
    after = {"steps": steps[:1], "error": "late key"}
    assert dumps(after) == json.dumps(after, **COMPACT)


def test_a_steps_copy_of_shared_rules_with_its_own_key_gives_the_same_text():
    """A step's `enforced` is the cage's dict copied with the step's `memory` added: its values
    are the shared objects, its `memory` its own; nested dicts, lists, None, floats, escapes."""
    base = {"landlock": {"abi": 7, "rules": [["/usr", "read"]] * 3}, "seccomp": None,
            "env": {"set": {"HOME": "caf\u00e9 \"x\"\n"}}, "limits": {"wall_seconds": 1.5, "n": [1, 2.5]}}
    steps = [{"name": f"s{i}", "enforced": {**base, "memory": {"cgroup_mib": 64, "peak_mib": 0.1 * i}}}
             for i in range(4)]
    steps.append({"name": "plain", "enforced": base})
    steps.append({"name": "empty", "enforced": {}})
    steps.append({"name": "list", "enforced": [base, base]})
    data = {"version": 1, "steps": steps}
    assert dumps(data) == json.dumps(data, **COMPACT)
