"""The step and gate statuses (`sandboy.gate.status.Status`) are the names the report schema
allows and every console label covers: a status added in one place and not the others would
write a report its own schema rejects, or crash the table on a missing label."""

import json
import pathlib

from sandboy.gate import console, report
from sandboy.gate.status import Status

SCHEMA = json.loads((pathlib.Path(report.__file__).parent / "report.schema.json").read_text())


def test_every_step_status_is_in_the_schema_and_has_a_label():
    step_statuses = SCHEMA["$defs"]["step"]["properties"]["status"]["enum"]
    assert sorted(step_statuses) == sorted(Status.ALL)
    assert sorted(console.LABELS) == sorted(Status.ALL)


def test_the_gates_own_status_names_are_in_the_schema():
    gate_statuses = SCHEMA["properties"]["status"]["enum"]
    assert sorted({report.gate_status(code) for code in (0, 1, 2, 3, 125, 130)}) == sorted(gate_statuses)


def test_the_groups_split_the_statuses_without_overlap():
    groups = (Status.FAILING, Status.REFUSED, (Status.PASSED,), Status.UNRUN)
    names = [name for group in groups for name in group]
    assert sorted(names) == sorted(Status.ALL)
