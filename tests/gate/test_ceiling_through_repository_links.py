"""The operator's ceiling against the repository's symlinks (session 7 red team), from the host.

A ceiling path inside the repository — `exec = ["{repo}/.venv/bin"]` so steps may run the
project's tools, or `write = ["{repo}/build"]` so they may write only there — was resolved with
every symlink followed, at each step's meet and cage build. The repository chose its target: a
committed `.venv/bin -> DIR` (or one an earlier step planted) made the ceiling grant DIR, and a
step read a host secret there, with or without a policy of its own; `build -> DIR` let a step
write DIR. Now such a link is not followed (the grant is dropped, a narrowing says so). Twins: a
real `.venv/bin` still runs, and the operator's own symlink outside the repository is followed.

What the first tests left unprobed (rvsec7's review; both mutants survived them): a link planted by
an earlier step in a ceiling write root OUTSIDE the repository (a shared cache the operator lets
steps write) must not choose what a ceiling exec path there grants; the operator's own ABSOLUTE
link outside the repository that leads into it is followed into the repository — where a
repository link then is not followed.
"""

from __future__ import annotations

import os

from gatekit import by_name, make_repo, run_json

from sandboy.gate import ceiling as ceilings

SECRET = "TOPSECRET-ceiling-link-7"


def _ceiling(tmp_path, write_only=None, **fs):
    """The built-in ceiling with `fs` entries put first; `write_only` replaces its write roots."""
    data = ceilings._copied(ceilings.BUILTIN)
    for key, extra in fs.items():
        data["fs"][key] = [*extra, *data["fs"][key]]
    if write_only is not None:
        data["fs"]["write"] = write_only
    path = tmp_path / "ceiling.toml"
    path.write_text(ceilings.to_toml(data))
    return path


def _secret_dir(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    (host / "key").write_text(SECRET + "\n")
    return host


STEAL_POLICY = """
[policy.p]
version = 1
fs.read = ["/usr", "/lib", "/lib64", "/bin", "/etc", "."]
fs.exec = ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64", "{host}"]
"""


def _assert_not_leaked(proc, report):
    assert SECRET not in proc.stdout and SECRET not in proc.stderr
    assert SECRET not in str(report)


def test_a_committed_link_cannot_choose_what_the_ceilings_exec_path_grants(tmp_path):
    host = _secret_dir(tmp_path)
    gate = f"""
    [[step]]
    name = "with-policy"
    run = "cat {host}/key"
    policy = "p"
    allow_failure = true

    [[step]]
    name = "under-the-ceiling"
    run = "cat {host}/key"
    allow_failure = true
    """ + STEAL_POLICY.replace("{host}", str(host))
    repo = make_repo(tmp_path, gate)
    (repo / ".venv").mkdir()
    os.symlink(host, repo / ".venv" / "bin")  # shipped with the repository
    proc, report = run_json(repo, tmp_path, "--ceiling", _ceiling(tmp_path, exec=["{repo}/.venv/bin"]))
    _assert_not_leaked(proc, report)
    steps = by_name(report)
    for name in ("with-policy", "under-the-ceiling"):
        assert steps[name]["status"] == "failed", steps[name]
        assert any("passes through the symlink" in n["text"] and ".venv/bin" in n["text"]
                   for n in steps[name]["narrowings"]), steps[name]["narrowings"]


def test_a_link_an_earlier_step_planted_is_not_followed_either(tmp_path):
    host = _secret_dir(tmp_path)
    gate = f"""
    [[step]]
    name = "plant"
    run = "mkdir -p .venv && ln -s {host} .venv/bin"

    [[step]]
    name = "steal"
    run = "cat {host}/key"
    allow_failure = true
    """
    repo = make_repo(tmp_path, gate)
    proc, report = run_json(repo, tmp_path, "--ceiling", _ceiling(tmp_path, exec=["{repo}/.venv/bin"]))
    _assert_not_leaked(proc, report)
    steps = by_name(report)
    assert steps["plant"]["status"] == "passed" and os.path.islink(repo / ".venv" / "bin")
    assert steps["steal"]["status"] == "failed"


def test_a_committed_link_cannot_move_the_ceilings_only_write_root(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    gate = f"""
    [[step]]
    name = "write"
    run = "echo OWNED > build/planted; echo OWNED > {outside}/direct"
    policy = "w"
    allow_failure = true

    [[step]]
    name = "write-under-the-ceiling"
    run = "echo OWNED > build/planted2"
    allow_failure = true

    [policy.w]
    version = 1
    fs.read = ["/usr", "/lib", "/lib64", "/bin", "/etc", "."]
    fs.exec = ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]
    fs.write = ["build", "{outside}"]
    """
    repo = make_repo(tmp_path, gate)
    os.symlink(outside, repo / "build")
    proc, report = run_json(repo, tmp_path, "--ceiling", _ceiling(tmp_path, write_only=["{repo}/build", "{tmp}"]))
    assert "Traceback" not in proc.stderr
    assert sorted(os.listdir(outside)) == []  # host side: nothing written through the link
    assert by_name(report)["write"]["status"] == "failed"


def test_twin_a_real_venv_bin_and_the_operators_own_link_outside_are_granted(tmp_path):
    tools = tmp_path / "tools-real"
    tools.mkdir()
    (tools / "op-tool").write_text("#!/bin/sh\necho operator tool ran\n")
    (tools / "op-tool").chmod(0o755)
    os.symlink(tools, tmp_path / "tools")  # the operator's own link, outside the repository
    gate = """
    [[step]]
    name = "venv"
    run = ".venv/bin/project-tool"

    [[step]]
    name = "operator"
    run = "TOOLS/op-tool"
    """.replace("TOOLS", str(tmp_path / "tools"))
    repo = make_repo(tmp_path, gate)
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "project-tool").write_text("#!/bin/sh\necho project tool ran\n")
    (repo / ".venv" / "bin" / "project-tool").chmod(0o755)
    ceiling = _ceiling(tmp_path, exec=["{repo}/.venv/bin", str(tmp_path / "tools")])
    proc, report = run_json(repo, tmp_path, "--ceiling", ceiling)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "project tool ran" in proc.stdout and "operator tool ran" in proc.stdout
    assert not any(n for s in report["steps"] for n in s["narrowings"])


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
