"""A real installation of the running source tree, built in a temporary directory, and the attacks a
caged command makes on it (tests/cage/test_own_install.py, test_mutations_protected.py; ADR 0024).

`Install(base, layout, package_copy)`: a virtual environment made by the real interpreter
(`python -m venv`), the package copied in editable shape (`base/src/sandboy` + the `.pth` file
setuptools writes for `pip install -e .`, as `make setup` makes) or wheel shape (in
site-packages), its run-path bundle built by that interpreter (`copy_package`), and pip's
console script. Sandboy run FROM it is the Sandboy these tests attack.
"""

from __future__ import annotations

import glob
import marshal
import os
import shutil
import subprocess
import sys

import sandboy

PACKAGE = os.path.dirname(os.path.abspath(sandboy.__file__))
# The interpreter under this test's virtual environment: the installations are made from it.
BASE_PYTHON = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
ATTACKS = ("pth", "cli", "bundle", "script", "python")


def copy_package(directory, python=BASE_PYTHON):
    """The running source tree's package under `directory`, without byte code, and its run-path
    bundle built by `python` (every later copy keeps the mtimes, so the bundle validates)."""
    dest = directory / "sandboy"
    shutil.copytree(PACKAGE, dest, ignore=shutil.ignore_patterns("__pycache__", "*.tmp"))
    subprocess.run([python, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import sandboy.bytecode_bundle as b; "
                    "b.build(sys.argv[2])", str(dest.parent), str(dest)], check=True, capture_output=True)
    return dest


def answers(stdout: str) -> dict:
    """{attack: "ok" | "refused"} from the attack script's lines (a gate prefixes "[step] ")."""
    found = {}
    for line in stdout.splitlines():
        words = line.removeprefix("[plant] ").split(" ")
        if len(words) == 2 and words[0] in ("ok", "refused"):
            found[words[1]] = words[0]
    return found


class Install:
    """One installation of Sandboy under `base` (which a write root holds)."""

    def __init__(self, base, layout, package_copy, python=BASE_PYTHON):
        self.base, self.layout = base, layout
        self.venv = base / ".venv"
        subprocess.run([python, "-m", "venv", "--without-pip", str(self.venv)], check=True, capture_output=True)
        (self.site,) = glob.glob(str(self.venv / "lib" / "python3.*" / "site-packages"))
        if layout in ("editable", "flat"):  # `pip install -e .` of a src layout: what `make setup` makes
            # ("flat": the package at the checkout's top, so the checkout is the import path)
            self.import_path = base / "src" if layout == "editable" else base
            self.package = self.import_path / "sandboy"
            with open(os.path.join(self.site, "__editable__.sandboy-0.1.0.pth"), "w") as fh:
                fh.write(f"{self.import_path}\n")
        else:  # a wheel
            self.package = base / ".venv" / os.path.relpath(self.site, self.venv) / "sandboy"
        shutil.copytree(package_copy, self.package, symlinks=True)
        self.script = self.venv / "bin" / "sandboy"  # as pip writes it
        self.script.write_text(f"#!{self.venv}/bin/python\nimport sys\nfrom sandboy.cli import entry\n"
                               "if __name__ == '__main__':\n    sys.exit(entry())\n")
        os.chmod(self.script, 0o755)
        (self.bundle,) = glob.glob(str(self.package / "__pycache__" / "run-path.*.bundle"))
        self.marks = base.parent / f"{base.name}-marks"  # where the payloads would leave a trace
        self.marks.mkdir()
        self.path_link = self.pycache = self.tools = None

    as_user = ()  # e.g. setpriv to uid 65534: every run of this installation's `sandboy`, as its owner

    def sandboy(self, *args, env=None, check_rc=None, **kw):
        proc = subprocess.run([*self.as_user, str(self.script), *args], capture_output=True, text=True, timeout=120,
                              env={"PATH": "/usr/bin:/bin", "HOME": str(self.base.parent),
                                   "SANDBOY_CACHE_DIR": str(self.base.parent / "cache"),
                                   # `make test`'s second pass: the pure-Python plan executor
                                   **{k: os.environ[k] for k in ("SANDBOY_NATIVE",) if k in os.environ},
                                   **(env or {})}, **kw)
        if check_rc is not None:
            assert proc.returncode == check_rc, (proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
        return proc

    def add_path_link(self) -> str:
        """`base/bin/sandboy -> .venv/bin/sandboy`, as `~/.local/bin/sandboy` often is: the first
        `sandboy` on the PATH returned (for the run's environment)."""
        (self.base / "bin").mkdir()
        self.path_link = self.base / "bin" / "sandboy"
        os.symlink(self.script, self.path_link)
        return f"{self.base / 'bin'}:/usr/bin:/bin"

    def add_other_environment_on_path(self, python=BASE_PYTHON) -> str:
        """A second environment, `base/tools`, whose `sandboy` script is the first on the PATH
        returned (`base/bin/sandboy -> tools/bin/sandboy`, as pipx leaves it): the operator's
        next `sandboy` runs there, not in this installation's environment. Its site-packages
        reads this installation's source through a `.pth`, so that `sandboy` works."""
        self.tools = self.base / "tools"
        subprocess.run([python, "-m", "venv", "--without-pip", str(self.tools)], check=True, capture_output=True)
        (self.tools_site,) = glob.glob(str(self.tools / "lib" / "python3.*" / "site-packages"))
        with open(os.path.join(self.tools_site, "sandboy-source.pth"), "w") as fh:
            fh.write(f"{os.path.dirname(self.package)}\n")
        script = self.tools / "bin" / "sandboy"
        script.write_text(f"#!{self.tools}/bin/python\nimport sys\nfrom sandboy.cli import entry\n"
                          "if __name__ == '__main__':\n    sys.exit(entry())\n")
        os.chmod(script, 0o755)
        (self.base / "bin").mkdir()
        self.path_link = self.base / "bin" / "sandboy"
        os.symlink(script, self.path_link)
        return f"{self.base / 'bin'}:/usr/bin:/bin"

    def add_pycache_prefix(self) -> str:
        """A PYTHONPYCACHEPREFIX directory inside the write root (returned for the environment)."""
        self.pycache = self.base / "pycache"
        self.pycache.mkdir()
        return str(self.pycache)

    def target_paths(self) -> dict:
        """{attack: the path it changes}."""
        paths = {"pth": os.path.join(self.site, "zz_planted.pth"), "cli": str(self.package / "cli.py"),
                 "bundle": str(self.bundle), "script": str(self.script), "python": str(self.venv / "bin" / "python")}
        if self.layout == "editable":
            paths["importpath"] = str(self.base / "src" / "planted_module.py")
        if self.path_link:
            paths["pathlink"] = str(self.path_link)
        if self.pycache:
            paths["pycache"] = str(self.pycache / "planted.cpython-311.pyc")
        if self.tools:
            paths["nextpth"] = os.path.join(self.tools_site, "zz_planted.pth")
        return paths

    def targets(self) -> dict:
        """What each attack changes, as the host sees it now."""
        return {name: state(path) for name, path in self.target_paths().items()}

    def payloads_run(self, env=None) -> list:
        """The installation's next `sandboy --version` on the host: which payloads ran."""
        self.sandboy("--version", env=env, check_rc=0)
        return sorted(os.listdir(self.marks))

    def attack_script(self, only=ATTACKS) -> str:
        """The attacks (those named in `only`; None: every one this installation has), one shell script (file under `base`, so a gate
        step can run it too); each line prints "ok NAME" or "refused NAME"."""
        evil_bundle = self.base / "evil.bundle"
        evil_bundle.write_bytes(_bundle_serving_a_payload(self.package, self.bundle, self.marks / "bundle"))
        evil_python = self.base / "evil-python"
        evil_python.write_text(f"#!/bin/sh\n: > {self.marks / 'python'}\nexec {self.venv}/bin/python3 \"$@\"\n")
        os.chmod(evil_python, 0o755)
        evil_script = self.base / "evil-sandboy"
        evil_script.write_text(f"#!/bin/sh\n: > {self.marks / 'script'}\n")
        os.chmod(evil_script, 0o755)
        attempts = {
            "pth": f"printf 'import os; open(\"%s\", \"w\").close()\\n' '{self.marks / 'pth'}' > '{self.site}/zz_planted.pth'",
            "cli": f"printf '\\nopen(\"%s\", \"w\").close()\\n' '{self.marks / 'cli'}' >> '{self.package}/cli.py'",
            "bundle": f"cat '{evil_bundle}' > '{self.bundle}' || mv -f '{evil_bundle}' '{self.bundle}'",
            "script": f"cat '{evil_script}' > '{self.script}' || mv -f '{evil_script}' '{self.script}'",
            "python": f"ln -sfn '{evil_python}' '{self.venv}/bin/python'",
        }
        paths = self.target_paths()
        if "importpath" in paths:  # a module beside the package, found by a later `import` of its name
            attempts["importpath"] = f": > '{paths['importpath']}'"
        if "pathlink" in paths:
            attempts["pathlink"] = f"ln -sfn '{evil_script}' '{paths['pathlink']}'"
        if "pycache" in paths:
            attempts["pycache"] = f": > '{paths['pycache']}'"
        if "nextpth" in paths:
            attempts["nextpth"] = (f"printf 'import os; open(\"%s\", \"w\").close()\\n' '{self.marks / 'nextpth'}' "
                                   f"> '{paths['nextpth']}'")
        lines = [f"if ( {cmd} ) 2>/dev/null; then echo 'ok {name}'; else echo 'refused {name}'; fi"
                 for name, cmd in attempts.items() if only is None or name in only]
        path = self.base / "attack.sh"
        path.write_text("\n".join(lines) + "\nexit 0\n")
        return str(path)


def state(path):
    """A path as the host sees it: ("link", target), ("file", bytes, mode) or ("absent",)."""
    if os.path.islink(path):
        return ("link", os.readlink(path))
    if os.path.isfile(path):
        with open(path, "rb") as fh:
            return ("file", fh.read(), os.stat(path).st_mode)
    return ("absent",)


def restore(path, was) -> None:
    """Put `path` back as `state` saw it (after a mutant let an attack through)."""
    if state(path) == was:
        return
    if os.path.lexists(path):
        os.unlink(path)
    if was[0] == "link":
        os.symlink(was[1], path)
    elif was[0] == "file":
        with open(path, "wb") as fh:
            fh.write(was[1])
        os.chmod(path, was[2])


def _bundle_serving_a_payload(package, bundle, marker) -> bytes:
    """A copy of the installation's bundle whose `sandboy.cli` code first makes `marker`, with
    the index still naming the real sources' size, mtime and hash — what the finder checks —
    so the host serves the payload. Built with the module's own format (ADR 0023)."""
    with open(bundle, "rb") as fh:
        data = fh.read()
    end = 12 + int.from_bytes(data[8:12], "little")
    entries = marshal.loads(data[12:end])
    groups = {}
    for name, _pkg, relative, _size, _mtime, _hash, offset, length, position in entries:
        if length:  # 0: an extension module, whose file the index only names
            groups.setdefault(offset, [length, marshal.loads(data[end + offset:end + offset + length])])
    out_entries, blobs, new_offsets, cursor = [], [], {}, 0
    for offset, (length, codes) in sorted(groups.items()):
        codes = list(codes)
        for name, _pkg, relative, *_rest, entry_offset, _length, position in entries:
            if name == "sandboy.cli" and entry_offset == offset:
                with open(os.path.join(package, relative), "rb") as src:
                    source = f"open({str(marker)!r}, 'w').close()\n".encode() + src.read()
                codes[position] = compile(source, os.path.join(package, relative), "exec", dont_inherit=True)
        blob = marshal.dumps(tuple(codes))
        new_offsets[offset] = (cursor, len(blob))
        blobs.append(blob)
        cursor += len(blob)
    for name, is_package, relative, size, mtime, source_hash, offset, length, position in entries:
        moved = new_offsets[offset] if length else (0, 0)
        out_entries.append((name, is_package, relative, size, mtime, source_hash, *moved, position))
    index = marshal.dumps(tuple(out_entries))
    return data[:8] + len(index).to_bytes(4, "little") + index + b"".join(blobs)


