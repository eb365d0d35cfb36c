"""Directories of the operator's PATH inside a write root (ADR 0013, session 7; `confine.path_dirs`).

The operator's next command is looked up on the PATH of the shell that started Sandboy. A run
that may write `~/.local/bin` (the home granted) plants `git` there, found before `/usr/bin/git`:
the operator's next `git status` runs it. Each probe is judged from the host side: the planted
file, and what `shutil.which` finds first on the operator's PATH.

Decision: outside the run's working directory and repository, such a directory is protected by
default like `.bashrc` (read-only bind under the tier, made first when missing, reported
degraded without the tier); inside them (an activated `.venv/bin`) it stays writable and the
launch warns. Twins: `pip install` of a console script into the activated venv works; `pip
install --user` with the home granted fails under the tier with the warning naming the key, and
works with `fs.protect_defaults = false`.
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest
from cagekit import use_tier

from sandboy.confine import path_dirs
from wheelkit import make_wheel

PLANT = "printf '#!/bin/sh\\ntouch {pwned}\\n' > {dir}/{name} && chmod +x {dir}/{name}"


def test_which_path_directories_are_protected_and_which_warned(tmp_path):
    home, project = tmp_path / "home", tmp_path / "home" / "proj"
    for d in (home / ".local/bin", project / ".venv/bin", project / "node_modules/.bin", tmp_path / "elsewhere/bin"):
        d.mkdir(parents=True)
    path = os.pathsep.join([f"{project}/.venv/bin", f"{home}/.local/bin", f"{home}/bin", "bin", "",
                            f"{project}/node_modules/.bin", f"{tmp_path}/elsewhere/bin", "/usr/bin"])
    protect, warn = path_dirs.on_path([str(home)], work=[str(project)], path_text=path, home=str(home))
    assert [e for e, _r, _root in protect] == [f"{home}/.local/bin", f"{home}/bin"]
    assert os.path.isdir(home / "bin"), "a PATH directory missing at launch is made, then protected"
    assert [e for e, _r, _root in warn] == [f"{project}/.venv/bin", f"{project}/node_modules/.bin"]
    # the home itself as the working directory does not make its bin directories project files
    protect, warn = path_dirs.on_path([str(home)], work=[str(home)], path_text=path, home=str(home))
    assert f"{home}/.local/bin" in [e for e, _r, _root in protect] and not [w for w in warn if ".local" in w[0]]
    # a write root elsewhere, or strictly inside a PATH directory: nothing (it can only make its own name)
    assert path_dirs.on_path([str(tmp_path / "elsewhere" / "x")], path_text=path, home=str(home)) == ([], [])
    # a PATH directory that IS the write root: protected (the write root then read-only, warned)
    protect, _warn = path_dirs.on_path([str(home / ".local/bin")], work=[str(project)], path_text=path, home=str(home))
    assert [e for e, _r, _root in protect] == [f"{home}/.local/bin"]


@pytest.mark.needs_kernel
@pytest.mark.parametrize("tier", ["tier", "no-tier"])
def test_a_run_cannot_plant_a_program_on_the_operators_path(cage, tmp_path, monkeypatch, tier):
    """The home granted for writing, the run started in a project: `git` planted in
    `~/.local/bin` and `ls` in `~/bin` (missing at launch). Under the tier both writes get EROFS
    and the operator's PATH still finds the real programs; without it the gap is reported in
    `degraded`, by name (as for `.bashrc`), and the post-run check moves what was planted there
    into the quarantine: 125. Host side both ways: the operator's PATH finds the real programs."""
    use_tier(tier, monkeypatch)
    home = tmp_path / "home"
    (home / ".local/bin").mkdir(parents=True)
    operator_path = f"{home}/.local/bin:{home}/bin:/usr/bin:/bin"
    monkeypatch.setenv("PATH", operator_path)
    pwned = tmp_path / "PWNED"
    policy = cage.policy(fs={"read": ["/etc", "/proc/self"], "exec": ["/usr/bin", "/bin"], "write": [str(home), "."]},
                         env={"pass": [], "set": {"PATH": "/usr/bin:/bin", "HOME": str(home)}})
    script = (PLANT.format(pwned=pwned, dir=home / ".local/bin", name="git") + "; "
              + PLANT.format(pwned=pwned, dir=home / "bin", name="ls") + "; echo DONE")
    result = cage.run(argv=["/bin/sh", "-c", script], policy=policy, via="cli", env={**os.environ})
    assert "DONE" in result.out, result
    assert f"{home}/.local/bin is on PATH" in result.err and "fs.protect_defaults = false" in result.err, result
    if tier == "tier":
        assert result.err.count("Read-only file system") >= 2, result
        assert not (home / ".local/bin/git").exists() and not (home / "bin/ls").exists()
    else:
        # without a mount namespace: reported degraded by name (like the start-up files), and
        # judged after the run — the planted programs are moved out, the run fails closed
        assert "stay writable" in result.err and f"{home}/.local/bin" in result.err, result
        assert result.rc == 125 and "a program on the operator's PATH" in result.err, result
        assert not (home / ".local/bin/git").exists() and not (home / "bin/ls").exists()
        assert list((home / ".sandboy-quarantine").glob("*/*git")), "the planted git is not in the quarantine"
    assert shutil.which("git", path=operator_path) == "/usr/bin/git"
    assert shutil.which("ls", path=operator_path) in ("/usr/bin/ls", "/bin/ls")
    assert not pwned.exists()


@pytest.mark.needs_kernel
def test_inside_the_working_directory_a_path_directory_is_warned_about_not_protected(cage, tmp_path, monkeypatch):
    """An activated `.venv/bin` of the project (cwd): installing console scripts there is ordinary
    work, so it stays writable — the launch warning says what that allows; the planted `git` is
    then what the operator's shell finds first (host side: the decided, open behaviour)."""
    venv_bin = cage.work / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    operator_path = f"{venv_bin}:/usr/bin:/bin"
    monkeypatch.setenv("PATH", operator_path)
    pwned = tmp_path / "PWNED"
    policy = cage.policy(fs={"read": ["/etc", "/proc/self"], "exec": ["/usr/bin", "/bin"], "write": ["."]},
                         env={"pass": [], "set": {"PATH": "/usr/bin:/bin"}})
    result = cage.run(argv=["/bin/sh", "-c", PLANT.format(pwned=pwned, dir=".venv/bin", name="git")],
                      policy=policy, via="cli", env={**os.environ})
    assert result.rc == 0, result
    assert f"{venv_bin} is on PATH" in result.err and "stays writable" in result.err, result
    assert shutil.which("git", path=operator_path) == str(venv_bin / "git")


def _pip_policy(cage, home, write, defaults=True):
    base = sys.base_prefix
    fs = {"read": ["/etc", "/proc", base, "/dev/urandom"], "exec": ["/usr/bin", "/bin", base], "write": write}
    if not defaults:
        fs["protect_defaults"] = False
    return cage.policy(fs=fs, env={"pass": [], "set": {"PATH": f"{base}/bin:/usr/bin:/bin", "HOME": str(home),
                                                       "TMPDIR": str(home / "tmp"), "PIP_CONFIG_FILE": "/dev/null",
                                                       "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}})


@pytest.mark.needs_kernel
@pytest.mark.parametrize("tier", ["tier", "no-tier"])
@pytest.mark.parametrize("case", ["protected: fails naming the key", "opted out: works"])
def test_pip_install_user_with_the_home_granted(cage, tmp_path, monkeypatch, case, tier):
    """The twin, with the real pip of the base interpreter: `pip install --user` of a package with
    a console script (into `~/.local/bin`, on the operator's PATH). Under the tier it fails with
    EROFS; without it the run ends 125 with the script in quarantine; both name
    `fs.protect_defaults = false`. Opted out it works."""
    use_tier(tier, monkeypatch)
    base_python = os.path.join(sys.base_prefix, "bin", "python3")
    if os.system(f"{base_python} -m pip --version >/dev/null 2>&1") != 0:
        pytest.skip("the base interpreter has no pip")
    home = tmp_path / "home"
    (home / ".local/bin").mkdir(parents=True)
    (home / "tmp").mkdir()
    monkeypatch.setenv("PATH", f"{home}/.local/bin:/usr/bin:/bin")
    wheel = make_wheel(home / "tmp", "demo_user_tool", script="demo-user-tool")
    policy = _pip_policy(cage, home, [str(home)], defaults=not case.startswith("opted"))
    result = cage.run(argv=[base_python, "-m", "pip", "install", "--user", "--no-deps", "-q", wheel],
                      policy=policy, via="cli", env={**os.environ}, timeout=120)
    tool = home / ".local/bin/demo-user-tool"
    if case.startswith("protected"):
        assert "fs.protect_defaults = false" in result.err, result
        if tier == "tier":
            assert result.rc != 0 and "Read-only file system" in result.err, result
        else:
            assert result.rc == 125 and "a program on the operator's PATH" in result.err, result
        assert not tool.exists()
    else:
        assert result.rc == 0 and tool.exists(), result


@pytest.mark.needs_kernel
@pytest.mark.parametrize("tier", ["tier", "no-tier"])
def test_pip_install_into_the_activated_project_venv_works(cage, tmp_path, monkeypatch, tier):
    """The twin inside the working directory: the project's `.venv` activated (its `bin/` first on
    PATH), the real pip installs a console script there: rc 0, the script made; a warning only."""
    use_tier(tier, monkeypatch)
    import subprocess

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(cage.work / ".venv")], check=True)
    import glob
    import sysconfig

    (site,) = glob.glob(str(cage.work / ".venv/lib/python3.*/site-packages"))
    with open(os.path.join(site, "tools.pth"), "w") as fh:  # pip, from this test interpreter's environment
        fh.write(sysconfig.get_paths()["purelib"] + "\n")
    venv_bin = cage.work / ".venv" / "bin"
    monkeypatch.setenv("PATH", f"{venv_bin}:/usr/bin:/bin")
    home = tmp_path / "home"
    (home / "tmp").mkdir(parents=True)
    wheel = make_wheel(home / "tmp", "demo_venv_tool", script="demo-venv-tool")
    policy = _pip_policy(cage, home, ["."])
    policy["fs"]["read"] += [sys.prefix, str(home)]
    policy["fs"]["write"] = [".", str(home / "tmp")]
    result = cage.run(argv=[str(venv_bin / "python"), "-m", "pip", "install", "--no-deps", "-q", wheel],
                      policy=policy, via="cli", env={**os.environ}, timeout=120)
    assert result.rc == 0 and (venv_bin / "demo-venv-tool").exists(), result
    assert f"{venv_bin} is on PATH" in result.err and "stays writable" in result.err, result


NPM = shutil.which("npm")


@pytest.mark.needs_kernel
@pytest.mark.skipif(not NPM, reason="needs npm")
@pytest.mark.parametrize("tier", ["tier", "no-tier"])
@pytest.mark.parametrize("case", ["npm install in the project", "npm install -g into the home's prefix"])
def test_npm_install_with_a_bin(cage, tmp_path, monkeypatch, tier, case):
    """The twins with the real npm (offline, a local package with a `bin`): installed into the
    project, its `node_modules/.bin` first on the operator's PATH, it works (warned only);
    installed with `-g` and the prefix `~/.local` (`~/.local/bin` on the PATH, the home granted),
    it fails — EROFS under the tier, 125 with the link in quarantine without it — and the
    launch warning names `fs.protect_defaults = false`."""
    use_tier(tier, monkeypatch)
    home = tmp_path / "home"
    (home / ".local/bin").mkdir(parents=True)
    tool = cage.work / "tool"
    tool.mkdir()
    (tool / "package.json").write_text('{"name":"demo-tool","version":"1.0.0","bin":{"demo-tool":"cli.js"}}')
    (tool / "cli.js").write_text('#!/usr/bin/env node\nconsole.log("demo")\n')
    (cage.work / "package.json").write_text('{"name":"proj","version":"1.0.0"}')
    project = case == "npm install in the project"
    bin_dir = cage.work / "node_modules/.bin" if project else home / ".local/bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    npm_env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "npm_config_cache": str(home / ".npm"),
               "npm_config_update_notifier": "false", "npm_config_audit": "false", "npm_config_fund": "false"}
    if not project:
        npm_env["npm_config_prefix"] = str(home / ".local")
    policy = cage.policy(fs={"read": ["/etc", "/proc", str(cage.work)], "exec": ["/usr/bin", "/bin", "/usr/lib"],
                             "write": [".", str(home)] if project else [str(home)]},
                         env={"pass": [], "set": npm_env})
    argv = [NPM, "install", "--offline", "--install-links", *([] if project else ["-g"]), "./tool"]
    result = cage.run(argv=argv, policy=policy, via="cli", env={**os.environ}, timeout=120)
    link = bin_dir / "demo-tool"
    if project:
        assert result.rc == 0 and os.path.lexists(link), result
        assert f"{bin_dir} is on PATH" in result.err and "stays writable" in result.err, result
    else:
        assert "fs.protect_defaults = false" in result.err, result
        if tier == "tier":
            assert result.rc != 0 and ("EROFS" in result.err or "read-only" in result.err.lower()), result
        else:
            assert result.rc == 125 and "a program on the operator's PATH" in result.err, result
        assert not os.path.lexists(link)
