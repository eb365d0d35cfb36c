"""repository_files.resolve_inside / read_inside: a repository's files name paths that Sandboy
looks up with the host's rights, so symlinks are followed only while they stay inside the
repository, and nothing outside it is ever looked at (the refusal must not depend on whether a
host path exists). The gate, `audit run` and `policy compile` use it (their own tests run the
attacks end to end: tests/audit/test_repository_symlinks.py, tests/gate/test_config.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandboy.errors import PolicyError
from sandboy.repository_files import MAX_LINKS, OutsideRepository, read_inside, resolve_inside


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "sub" / "deep").mkdir(parents=True)
    (repo / "sub" / "deep" / "file").write_text("inside\n")
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "secret").write_text("host secret\n")
    return repo


def _looked_at(monkeypatch) -> list:
    """Every path the module hands the kernel (lstat, stat, readlink, open), recorded."""
    seen: list = []
    for name in ("lstat", "stat", "readlink", "open"):
        real = getattr(os, name)

        def spy(path, *args, _real=real, **kw):
            seen.append(os.fspath(path))
            return _real(path, *args, **kw)
        monkeypatch.setattr(os, name, spy)
    return seen


@pytest.mark.parametrize("target", ["{host}/secret", "{host}/missing", "../host/secret", "../host/missing",
                                    "sub/../../host/secret", "{host}", "/", "../repo-sibling"])
def test_a_link_out_is_refused_without_looking_outside(repo: Path, monkeypatch, target: str) -> None:
    host = repo.parent / "host"
    os.symlink(target.format(host=host), repo / "k")
    os.symlink("k", repo / "chain")
    for name in ("k", "k/x", "chain", "chain/x", "sub/../k"):
        seen = _looked_at(monkeypatch)
        with pytest.raises(OutsideRepository) as info:
            resolve_inside(str(repo), name, "SRC", "KEY")
        monkeypatch.undo()
        # the repository's own path is resolved (the operator's), then nothing but inside it
        inside = [p for p in seen if p.startswith(str(repo) + "/")]
        assert inside and all(p in inside or (str(repo) + "/").startswith(p.rstrip("/") + "/") for p in seen), seen
        assert info.value.link in ("k", "chain") and "leads outside the repository" in str(info.value)
        assert str(info.value).startswith("SRC: KEY: ")


def test_the_refusal_is_the_same_whether_the_target_exists(repo: Path) -> None:
    host = repo.parent / "host"
    messages = []
    for target in ("secret", "missing"):
        link = repo / "k"
        if link.is_symlink():
            link.unlink()
        os.symlink(host / target, link)
        with pytest.raises(OutsideRepository) as info:
            resolve_inside(str(repo), "k", "SRC")
        messages.append(str(info.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("name", ["/etc/passwd", "..", "../x", "sub/../../x", "a\0b"])
def test_names_that_leave_by_their_spelling(repo: Path, name: str) -> None:
    with pytest.raises(OutsideRepository):
        resolve_inside(str(repo), name)


def test_twin_links_that_stay_inside_are_followed(repo: Path) -> None:
    os.symlink("sub/deep", repo / "rel")
    os.symlink(repo / "sub", repo / "abs")             # absolute, but spelling the repository's path
    os.symlink("../deep/file", repo / "sub" / "up")      # '..' inside a link, staying in
    os.symlink("rel", repo / "chain")
    os.symlink("sub/deep/..", repo / "dotdot")
    file = str(repo / "sub" / "deep" / "file")
    assert resolve_inside(str(repo), "rel/file") == file
    assert resolve_inside(str(repo), "abs/deep/file") == file
    assert resolve_inside(str(repo), "chain/../deep/file") == file  # '..' after a link: from where it led
    assert resolve_inside(str(repo), "dotdot/deep/file") == file
    assert resolve_inside(str(repo), "./sub//deep/./file") == file
    assert resolve_inside(str(repo), "missing/x") == str(repo / "missing" / "x")
    assert read_inside(str(repo), "rel/file", 100) == (file, b"inside\n")
    assert read_inside(str(repo), "nothing", 100) is None


def test_a_link_loop_is_an_error_not_a_hang(repo: Path) -> None:
    os.symlink("b", repo / "a")
    os.symlink("a", repo / "b")
    with pytest.raises(PolicyError, match=f"more than {MAX_LINKS} symlinks"):
        resolve_inside(str(repo), "a")


def test_read_inside_refuses_what_is_not_a_regular_file_or_too_big(repo: Path) -> None:
    os.mkfifo(repo / "fifo")
    with pytest.raises(PolicyError, match="not a regular file"):
        read_inside(str(repo), "fifo", 100)  # O_NONBLOCK: no writer, no hang
    with pytest.raises(PolicyError, match="not a regular file"):
        read_inside(str(repo), "sub", 100)
    (repo / "big").write_bytes(b"x" * 101)
    with pytest.raises(PolicyError, match="larger than 100 bytes"):
        read_inside(str(repo), "big", 100)


def _policy(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sandboy", "policy", "check", "--root", str(root), *args],
                          capture_output=True, text=True, timeout=30)


def test_policy_compile_refuses_a_policy_file_leading_out_or_a_fifo(repo: Path) -> None:
    """`sandboy policy check|compile` read ROOT/owen.policy.toml following a symlink to any file
    (a TOML error then quoted its line and column) and hung on a FIFO. Now exit 2, at once."""
    os.symlink(repo.parent / "host" / "secret", repo / "owen.policy.toml")
    done = _policy(repo)
    assert done.returncode == 2 and "leads outside the repository" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    os.unlink(repo / "owen.policy.toml")
    os.mkfifo(repo / "owen.policy.toml")
    done = _policy(repo)
    assert done.returncode == 2 and "not a regular file" in done.stderr, done.stderr


def test_twin_policy_compile_follows_a_link_inside_the_repository(repo: Path) -> None:
    (repo / "policies").mkdir()
    (repo / "policies" / "owen.toml").write_text('version = 1\ntargets = ["aiexclude"]\n')
    os.symlink("policies/owen.toml", repo / "owen.policy.toml")
    done = subprocess.run([sys.executable, "-m", "sandboy", "policy", "compile", "--root", str(repo)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("rel, kind", [(".cursorignore", "fifo"), (".claude/settings.json", "fifo"),
                                       (".sandboy/owned.json", "fifo"), (".cursorignore", "dir")])
@pytest.mark.parametrize("verb", ["compile", "check"])
def test_policy_compile_refuses_a_generated_path_that_is_not_a_regular_file(tmp_path: Path, rel: str, kind: str,
                                                                           verb: str) -> None:
    """A repository shipping a FIFO where compile reads or merges a generated file hung
    `policy compile` and `check` for ever (no writer comes); a directory there ended compile
    with "cannot write the output". Now exit 2 naming the file, at once; host side: the FIFO is
    still there, untouched, and nothing blocked."""
    root = tmp_path / "r"
    (root / ".claude").mkdir(parents=True)
    (root / ".sandboy").mkdir()
    (root / "owen.policy.toml").write_text('version = 1\ntargets = ["cursor", "claude"]\n')
    (os.mkfifo if kind == "fifo" else os.mkdir)(root / rel)
    done = subprocess.run([sys.executable, "-m", "sandboy", "policy", verb, "--root", str(root)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{rel}: is not a regular file" in done.stderr and "Traceback" not in done.stderr
    assert (root / rel).is_fifo() if kind == "fifo" else (root / rel).is_dir()


def test_twin_policy_compile_merges_into_regular_files(tmp_path: Path) -> None:
    root = tmp_path / "r"
    (root / ".claude").mkdir(parents=True)
    (root / "owen.policy.toml").write_text('version = 1\ntargets = ["cursor", "claude"]\n')
    (root / ".claude" / "settings.json").write_text('{"theme": "dark"}\n')
    done = subprocess.run([sys.executable, "-m", "sandboy", "policy", "compile", "--root", str(root)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert '"theme": "dark"' in (root / ".claude" / "settings.json").read_text()
    assert subprocess.run([sys.executable, "-m", "sandboy", "policy", "check", "--root", str(root)],
                          capture_output=True, text=True, timeout=30).returncode == 0
