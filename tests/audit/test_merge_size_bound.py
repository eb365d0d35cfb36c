""""Output never larger than the inputs together" (issue 12), enforced by every merge
(merge.enforce_size_bound): generated logs of every shape merge within the bound; the bytes the
merge adds on purpose are counted exactly; and a merge whose output would exceed the bound fails
and writes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandboy.audit import merge, sarif

TOOLS = ("alpha", "beta", "gamma")
FILES = {"src/a.py": "import os\nos.system(x)\n\n  eval(y)\n", "lib/b.c": "int main() {\n  return 0;\n}\n"}
texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), texts,
                      st.floats(allow_nan=False, allow_infinity=False, width=32))
bags = st.dictionaries(st.text(alphabet="abcxyz", min_size=1, max_size=5), json_leaf, max_size=3)


@st.composite
def runs(draw: st.DrawFn) -> dict:
    tool = draw(st.sampled_from(TOOLS))
    rule_ids = draw(st.lists(st.sampled_from(("R1", "R2", "R3", "R4")), unique=True, max_size=4))
    rules = [{"id": rid, **({"shortDescription": {"text": draw(texts) or rid}} if draw(st.booleans()) else {})}
             for rid in rule_ids]
    uris = draw(st.lists(st.sampled_from(sorted(FILES) + ["gone.py"]), unique=True, max_size=3))
    artifacts = [{"location": {"uri": u}} for u in uris]
    results = []
    for _ in range(draw(st.integers(0, 6))):
        result: dict = {"message": {"text": draw(texts) or "m"}} if draw(st.integers(0, 4)) else {"message": {"id": "default"}}
        if rule_ids and draw(st.booleans()):
            index = draw(st.integers(0, len(rule_ids) - 1))
            result["ruleIndex"] = index
            if draw(st.booleans()):
                result["ruleId"] = rule_ids[index]
        else:
            result["ruleId"] = draw(st.sampled_from(("X1", "X2")))
        if uris:
            k = draw(st.integers(0, len(uris) - 1))
            location = {"uri": uris[k], **({"index": k} if draw(st.booleans()) else {})}
            result["locations"] = [{"physicalLocation": {"artifactLocation": location,
                                                         "region": {"startLine": draw(st.integers(1, 5))}}}]
        if draw(st.integers(0, 3)) == 0:
            result["partialFingerprints"] = {"primaryLocationLineHash": draw(st.sampled_from(("abc:1", "def:2")))}
        if draw(st.booleans()):
            result["properties"] = draw(bags)
        results.append(result)
        if draw(st.integers(0, 4)) == 0:
            results.append(json.loads(json.dumps(result)))  # an identical result: dropped
    run: dict = {"tool": {"driver": {"name": tool, **({"rules": rules} if rules else {})}}, "results": results}
    if artifacts:
        run["artifacts"] = artifacts
    if draw(st.booleans()):
        run["automationDetails"] = {"id": f"{draw(st.sampled_from(('cat1', 'cat2')))}/run{draw(st.integers(0, 2))}"}
    if draw(st.booleans()):
        run["invocations"] = [{"executionSuccessful": draw(st.booleans())}]
    return run


@st.composite
def logs(draw: st.DrawFn) -> list[tuple[dict, bool]]:
    """Logs and, for each, whether it is written compact (the hardest case: no whitespace to lose)."""
    return draw(st.lists(st.tuples(st.lists(runs(), min_size=0, max_size=3).map(
        lambda rs: {"version": "2.1.0", "runs": rs}), st.booleans()), min_size=1, max_size=4))


def _write(tmp: Path, docs: list[tuple[dict, bool]]) -> list[Path]:
    paths = []
    for i, (doc, compact) in enumerate(docs):
        path = tmp / f"in{i}.sarif"
        path.write_text(sarif.dumps(doc) if compact else json.dumps(doc, indent=2), encoding="utf-8")
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def source_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("src")
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=logs(), fingerprints=st.booleans(), github=st.booleans())
def test_generated_logs_merge_within_the_bound(tmp_path_factory: pytest.TempPathFactory, source_root: Path,
                                                docs: list[tuple[dict, bool]], fingerprints: bool, github: bool) -> None:
    tmp = tmp_path_factory.mktemp("gen")
    paths = _write(tmp, docs)
    text, report = merge.merge_files(paths, source_root if fingerprints else None, github)
    size = len(text.encode())
    assert report.input_bytes == sum(p.stat().st_size for p in paths)
    assert size == report.output_bytes <= report.input_bytes + report.added_bytes
    # The allowance is what was added, not slack: with nothing to add it is the $schema member only.
    if not fingerprints and not github and all(
            isinstance(r.get("automationDetails"), dict) for d, _ in docs for r in d["runs"]) and all(
            "ruleId" in res for d, _ in docs for r in d["runs"] for res in r["results"]):
        assert report.added_bytes == sarif.member_bytes("$schema", sarif.SARIF_SCHEMA_URI)
    assert json.loads(text)["version"] == "2.1.0"


def test_the_allowance_is_exactly_what_the_merge_added(tmp_path: Path, source_root: Path) -> None:
    """A compact input laid out as the merge writes it: the output is larger by exactly the
    counted additions (an id, a filled ruleId, two fingerprints, one with its object)."""
    result_a = {"ruleIndex": 0, "message": {"text": "a"},
                "locations": [{"physicalLocation": {"artifactLocation": {"uri": "src/a.py"}, "region": {"startLine": 2}}}]}
    result_b = {"ruleId": "R1", "ruleIndex": 0, "message": {"text": "b"}, "partialFingerprints": {"other": "x"},
                "locations": [{"physicalLocation": {"artifactLocation": {"uri": "lib/b.c"}, "region": {"startLine": 1}}}]}
    doc = {"$schema": sarif.SARIF_SCHEMA_URI, "version": "2.1.0",
           "runs": [{"tool": {"driver": {"name": "alpha", "rules": [{"id": "R1"}]}}, "results": [result_a, result_b]}]}
    path = tmp_path / "in.sarif"
    path.write_text(sarif.dumps(doc))
    text, report = merge.merge_files([path], source_root, False)
    out = json.loads(text)["runs"][0]
    assert out["automationDetails"] == {"id": "alpha/"} and out["results"][0]["ruleId"] == "R1"
    assert report.fingerprints_added == 2
    assert report.output_bytes - report.input_bytes == report.added_bytes - sarif.member_bytes("$schema", sarif.SARIF_SCHEMA_URI)


def test_a_merge_that_would_grow_fails_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard itself: the serialiser is swapped for one that pads the log (standing in for a
    merge bug that copies instead of moving) — the merge must refuse, not write."""
    doc = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "alpha"}}, "automationDetails": {"id": "a/"},
                                         "results": [{"ruleId": "R1", "message": {"text": "m"}}]}]}
    path = tmp_path / "in.sarif"
    path.write_text(sarif.dumps(doc))
    plain = sarif.dumps
    monkeypatch.setattr(merge.sarif, "dumps", lambda d: json.dumps(d, indent=8) + "\n" if isinstance(d, dict) and "runs" in d else plain(d))
    with pytest.raises(merge.MergeFailed, match=r"more than its inputs together \(\d+ bytes\) plus the \d+ bytes the merge adds"):
        merge.merge_files([path], None, False)


def test_the_cli_refuses_an_oversized_merge_with_exit_1(tmp_path: Path) -> None:
    """End to end through `sandboy audit merge` in a child process whose serialiser pads (as above):
    exit 1, the reason on stderr, no output file."""
    doc = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "alpha"}}, "automationDetails": {"id": "a/"},
                                         "results": [{"ruleId": "R1", "message": {"text": "m"}}]}]}
    (tmp_path / "in.sarif").write_text(sarif.dumps(doc))
    code = ("import json, sys; from sandboy.audit import sarif; plain = sarif.dumps; "
            "sarif.dumps = lambda d: json.dumps(d, indent=8) + '\\n' if isinstance(d, dict) and 'runs' in d else plain(d); "
            "from sandboy.cli import main; sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", code, "audit", "merge", "in.sarif", "-o", "out.sarif"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "more than its inputs together" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out.sarif").exists()


def test_indices_remapped_to_more_digits_are_counted(tmp_path: Path) -> None:
    """Two compact logs of one tool: the second's rule 0 and artifact 0 become the folded run's
    rule 10 and artifact 10, one more digit in each of its 400 results. That growth is the merge's
    own (counted), so the merge succeeds — it used to fail the size bound ("a Sandboy bug")."""
    first = {"tool": {"driver": {"name": "alpha", "rules": [{"id": f"R{i}"} for i in range(10)]}},
             "automationDetails": {"id": "c/"}, "artifacts": [{"location": {"uri": f"f{i}.py"}} for i in range(10)],
             "results": []}
    second = {"tool": {"driver": {"name": "alpha", "rules": [{"id": "Z"}]}}, "automationDetails": {"id": "c/"},
              "artifacts": [{"location": {"uri": "z.py"}}],
              "results": [{"ruleId": "Z", "ruleIndex": 0, "message": {"text": f"m{j}"},
                           "locations": [{"physicalLocation": {"artifactLocation": {"uri": "z.py", "index": 0}}}]}
                          for j in range(400)]}
    paths = _write(tmp_path, [({"version": "2.1.0", "runs": [first]}, True), ({"version": "2.1.0", "runs": [second]}, True)])
    text, report = merge.merge_files(paths, None, False)
    out = json.loads(text)["runs"]
    assert len(out) == 1 and {r["ruleIndex"] for r in out[0]["results"]} == {10}
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["index"] for r in out[0]["results"]} == {10}
    assert report.added_bytes == sarif.member_bytes("$schema", sarif.SARIF_SCHEMA_URI) + 2 * 400
    assert report.output_bytes <= report.input_bytes + report.added_bytes


@pytest.mark.parametrize("rule, message", [
    ({"shortDescription": {"text": "A" * 100_000}}, {"id": "none"}),  # one long text on every result
    ({"messageStrings": {"m": {"text": "{0}" * 30_000}}}, {"id": "m"}),  # a template repeating its argument
    ({"messageStrings": {"m": {"text": "{0}" * 300}}}, {"id": "m", "arguments": ["{1}" * 300, "B" * 300]}),  # nested
])
def test_github_message_fill_cannot_amplify_the_output(tmp_path: Path, rule: dict, message: dict) -> None:
    """From the attacker's side: a log built so that --github's own additions (message.text filled
    from the rule), not copying, would make the output many times its input — counted in the size
    bound, but unbounded until the fills got a budget (inputs + 1 MiB). 300 results: 0.12 MB in,
    30 MB out before. The merge refuses, naming why; nothing is built past the budget."""
    results = [{"ruleId": "R", "ruleIndex": 0, "message": {**message, "arguments": [*message.get("arguments", ["x"]), str(j)]}}
               for j in range(300)]
    doc = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "alpha", "rules": [{"id": "R", **rule}]}},
                                         "automationDetails": {"id": "a/"}, "results": results}]}
    path = tmp_path / "in.sarif"
    path.write_text(sarif.dumps(doc))
    with pytest.raises(merge.MergeFailed, match=r"/runs/0 \(alpha\): filling message.text from the rules would add more"):
        merge.merge_files([path], None, True)


def test_github_message_fill_substitutes_once_within_the_budget(tmp_path: Path) -> None:
    """The twin: fills within the budget are made, placeholders replaced in one pass (an argument
    holding '{1}' is shown as it is), and the output stays within the bound."""
    rules = [{"id": "R", "messageStrings": {"m": {"text": "got {0} and {1}, {2} stays"}}}, {"id": "S", "shortDescription": {"text": "short"}}]
    results = [{"ruleId": "R", "ruleIndex": 0, "message": {"id": "m", "arguments": ["a{1}", f"b{j}"]}} for j in range(50)]
    results += [{"ruleId": "S", "ruleIndex": 1, "message": {"id": "none", "arguments": [str(j)]}} for j in range(50)]
    doc = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "alpha", "rules": rules}},
                                         "automationDetails": {"id": "a/"}, "results": results}]}
    path = tmp_path / "in.sarif"
    path.write_text(sarif.dumps(doc))
    text, report = merge.merge_files([path], None, True)
    out = json.loads(text)["runs"][0]["results"]
    assert out[3]["message"]["text"] == "got a{1} and b3, {2} stays" and out[60]["message"]["text"] == "short"
    assert report.output_bytes <= report.input_bytes + report.added_bytes
