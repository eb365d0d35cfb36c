"""A wheel written by hand for the legitimate twins of the planting probes (`pip install <pkg>` in
a step): a package, optionally a console script and a `.pth` file at its root (as coverage 7's
wheel ships `a1_coverage.pth`, setuptools' `distutils-precedence.pth`, an editable install's
`__editable__.*.pth`). Installed by the real pip, offline (`--no-index`). A unique module name,
like cagekit."""

from __future__ import annotations

import os
import subprocess
import zipfile


def make_wheel(directory, name: str, pth: str | None = None, script: str | None = None) -> str:
    """`<directory>/<name>-1.0-py3-none-any.whl` holding package `name` (`main()` prints its
    name), `<name>.pth` with `pth` as its text where given, and a console script `script`
    running `name:main` where given. Returns the wheel's path."""
    dist = f"{name}-1.0.dist-info"
    files = {f"{name}/__init__.py": f"def main():\n    print({name!r})\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: wheelkit\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    if pth is not None:
        files[f"{name}.pth"] = pth
    if script:
        files[f"{dist}/entry_points.txt"] = f"[console_scripts]\n{script} = {name}:main\n"
    files[f"{dist}/RECORD"] = "".join(f"{path},,\n" for path in files) + f"{dist}/RECORD,,\n"
    path = os.path.join(str(directory), f"{name}-1.0-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in files.items():
            wheel.writestr(member, text)
    return path


def pip_install(python, wheel, *options, env=None) -> subprocess.CompletedProcess:
    """The real pip (this test interpreter's) installing `wheel` for `python`, offline, no
    configuration files read."""
    environ = {**(env or os.environ), "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    return subprocess.run([str(python), "-m", "pip", "install", "--isolated", "--no-index", "--no-deps", "-q",
                           *options, str(wheel)], env=environ, capture_output=True, text=True, timeout=180)

