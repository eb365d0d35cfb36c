"""The ceiling against symlinks, what session 7's tests left unprobed (rvsec7's review of
`gate/repository_links.py`; both mutants survived the first tests):

- a link planted by an earlier step in a ceiling write root OUTSIDE the repository (a shared
  cache the operator lets steps write) must not choose what a ceiling exec path there grants;
- the operator's own ABSOLUTE link outside the repository that leads into it must be followed
  into the repository — where a repository link then is not followed.
Host side: the secret never reaches a report or the console."""

from __future__ import annotations

import os

from gatekit import by_name, make_repo, run_json

from sandboy.gate import ceiling as ceilings

SECRET = "TOPSECRET-ceiling-review-7"


def _ceiling(tmp_path, **fs):
    data = ceilings._copied(ceilings.BUILTIN)
    for key, extra in fs.items():
        data["fs"][key] = [*extra, *data["fs"][key]]
    path = tmp_path / "ceiling.toml"
    path.write_text(ceilings.to_toml(data))
    return path


def _secret_dir(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    (host / "key").write_text(SECRET + "\n")
    return host


def _assert_not_leaked(proc, report):
    assert SECRET not in proc.stdout and SECRET not in proc.stderr
    assert SECRET not in str(report)


def test_a_link_planted_in_a_ceiling_write_root_outside_the_repository_is_not_followed(tmp_path):
    host, cache = _secret_dir(tmp_path), tmp_path / "cache"
    cache.mkdir()
    gate = f"""
    [[step]]
    name = "plant"
    run = "ln -s {host} {cache}/bin"

    [[step]]
    name = "steal"
    run = "cat {cache}/bin/key"
    allow_failure = true
    """
    repo = make_repo(tmp_path, gate)
    proc, report = run_json(repo, tmp_path, "--ceiling",
                            _ceiling(tmp_path, write=[str(cache)], exec=[f"{cache}/bin"]))
    _assert_not_leaked(proc, report)
    steps = by_name(report)
    assert steps["plant"]["status"] == "passed" and os.path.islink(cache / "bin")
    assert steps["steal"]["status"] == "failed"


def test_the_operators_absolute_link_into_the_repository_meets_the_repositorys_link(tmp_path):
    host = _secret_dir(tmp_path)
    gate = f"""
    [[step]]
    name = "steal"
    run = "cat {tmp_path}/tools/key"
    allow_failure = true
    """
    repo = make_repo(tmp_path, gate)
    (repo / ".venv").mkdir()
    os.symlink(host, repo / ".venv" / "bin")  # the repository's
    os.symlink(str(repo / ".venv" / "bin"), tmp_path / "tools")  # the operator's, absolute, into the repository
    proc, report = run_json(repo, tmp_path, "--ceiling", _ceiling(tmp_path, exec=[str(tmp_path / "tools")],
                                                                   read=[str(tmp_path / "tools")]))
    _assert_not_leaked(proc, report)
    assert by_name(report)["steal"]["status"] == "failed"
