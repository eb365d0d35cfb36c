"""Every command shown in README.md and docs/ works as written.

Each fenced `console` block (commands after `$ `) and `sh`/`bash`/`shell` block (every line that
is not a comment) is run as one bash script, in order, on a copy of the repository whose `.venv`
is this checkout's (so `make setup` has nothing to do), with that venv's bin first on PATH, as
after the quick start's `. .venv/bin/activate`. A block may be preceded by one marker:

    <!-- docs-test: skip REASON -->      not run; the reason says why and what covers it instead
    <!-- docs-test: exit=N [output] -->  the block's LAST command exits N; with `output`, the
                                         block's output lines must appear in what it printed

An unmarked block must exit 0 at every command.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
FENCE = re.compile(r"(?:<!-- docs-test: (?P<mark>[^\n]*?) -->\n)?```(?P<lang>console|sh|bash|shell)\n(?P<body>.*?)```",
                   re.S)


class Block:
    def __init__(self, path: Path, line: int, lang: str, body: str, mark: str | None):
        self.path, self.line, self.lang, self.mark = path, line, lang, mark or ""
        self.commands, self.output = [], []
        pending = ""
        for raw in body.splitlines():
            if lang == "console":
                if raw.startswith("$ "):
                    self.commands.append(raw[2:])
                elif raw.strip() and raw.strip() != "...":
                    self.output.append(raw.strip())
                continue
            text = pending + raw
            if text.rstrip().endswith("\\"):
                pending = text.rstrip()[:-1] + " "
                continue
            pending = ""
            if text.strip() and not text.lstrip().startswith("#"):
                self.commands.append(text)

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for path in DOCS:
        text = path.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start("lang")) + 1
            found.append(Block(path, line, match["lang"], match["body"], match["mark"]))
    return found


ALL = blocks()


def test_the_docs_have_command_blocks():
    """The extraction itself works (a silent regex miss would make every test below vacuous)."""
    ids = {b.id.split(":")[0] for b in ALL}
    assert "README.md" in ids and len([b for b in ALL if b.commands]) >= 4, [b.id for b in ALL]


def test_every_skip_says_why():
    for block in ALL:
        if block.mark.startswith("skip"):
            assert len(block.mark.split(None, 1)) == 2, f"{block.id}: `skip` needs a reason"


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """A copy of the repository (files as committed, mtimes kept) with this checkout's .venv."""
    root = tmp_path_factory.mktemp("docs") / "repo"
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    names = [n for n in listed.decode().split("\0") if n]
    if not names:
        pytest.skip("not a git checkout: nothing to copy")
    for name in names:
        src = REPO / name
        if src.is_file():
            dst = root / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    (root / ".venv").symlink_to(REPO / ".venv")
    stamp = REPO / ".venv" / ".installed"
    if stamp.exists():  # the shared venv is this checkout's, made by its `make setup`: current
        os.utime(root / "pyproject.toml", (stamp.stat().st_mtime - 1,) * 2)
    return root


@pytest.mark.parametrize("block", [b for b in ALL if b.commands], ids=lambda b: b.id)
def test_a_documented_command_block_works_as_written(block, scratch, tmp_path):
    if block.mark.startswith("skip"):
        pytest.skip(block.mark.split(None, 1)[1])
    expected_exit = 0
    match = re.search(r"exit=(\d+)", block.mark)
    if match:
        expected_exit = int(match.group(1))
    lines = ["set -o pipefail"]
    for command in block.commands:
        lines += [command, 'echo "__docs_rc__ $?" >&2']
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "GITHUB_STEP_SUMMARY")}
    # As a reader who followed the quick start (`. .venv/bin/activate`): the venv's bin on PATH.
    env.update(HOME=str(tmp_path), SANDBOY_CACHE_DIR=os.environ["SANDBOY_CACHE_DIR"],  # the suite's (tests/conftest.py)
               PATH=f"{scratch / '.venv' / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    proc = subprocess.run(["bash", "-c", "\n".join(lines)], cwd=scratch, capture_output=True, text=True,
                          env=env, timeout=900, stdin=subprocess.DEVNULL)
    codes = [int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("__docs_rc__ ")]
    said = proc.stdout + proc.stderr
    assert len(codes) == len(block.commands), f"{block.id}: the block stopped early\n{said[-3000:]}"
    want = [0] * (len(codes) - 1) + [expected_exit]
    assert codes == want, f"{block.id}: exit codes {codes}, expected {want}\n{said[-3000:]}"
    assert "Traceback" not in said, said[-3000:]
    if "output" in block.mark.split():
        for line in block.output:
            assert line in said, f"{block.id}: the documented output {line!r} was not printed:\n{said[-2000:]}"


def test_the_repository_explains_itself():
    """Comments and docs point at files in this repository (docs/design.md, docs/findings.md, ADRs),
    never at the project's working notes outside it; every docs/*.md named in src/ exists."""
    outside = re.compile(r"\b(DESIGN|FINDINGS)\.md\b|\.\./shared\b|\bFINDINGS\b")
    named = set()
    for path in [*REPO.glob("src/**/*.py"), *REPO.glob("tests/**/*.py"), *REPO.glob("bench/*.py"),
                 *REPO.glob("examples/**/*.py"), REPO / "Makefile", *DOCS]:
        if path == Path(__file__) or ".venv" in path.parts:
            continue
        text = path.read_text(errors="replace")
        assert not outside.search(text), f"{path.relative_to(REPO)} points outside the repository"
        named.update(re.findall(r"docs/([\w/-]+\.md)", text))
    missing = [name for name in sorted(named) if not (REPO / "docs" / name).is_file()]
    assert not missing, missing
