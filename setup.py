"""Only the optional C accelerator lives here; all metadata is in pyproject.toml.

`sandboy.confine._native` runs a cage plan in the child without Python (docs/performance.md).
It is optional: without a C compiler the build skips it and `sandboy.confine._libc` runs the
same plan in Python, slower (`sandboy doctor` says which one is in use).
"""

import importlib
import sys
import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

# The adapters' guest sources (adapters/: the WIT, common/ helpers, one directory per adapter) are
# not host code, but they are part of the product: a wheel must carry them so `sandboy audit`
# can build its components on first use with no source checkout (docs/adr/0014). They are
# copied into the built package as sandboy/audit/guest_sources/, the layout of adapters/.
GUEST_SOURCES = Path(__file__).resolve().parent / "adapters"
GUEST_PACKAGE_DIR = ("sandboy", "audit", "guest_sources")


def write_run_path_bundle(build_lib: Path) -> None:
    """The run path's byte code in one validated file (docs/adr/0023), written by the builder
    the built package itself carries (imported from the build directory: the writer takes the
    format from `sandboy/__init__.py`, which holds the reader), so the wheel's bundle matches its
    sources exactly. Written after the C executor is built (build_ext runs after build_py), so
    the bundle's index names it."""
    sys.path.insert(0, str(build_lib))
    dont_write_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no .pyc in the wheel
    try:
        bytecode_bundle = importlib.import_module("sandboy.bytecode_bundle")
        bytecode_bundle.build(str(build_lib / "sandboy"))
    finally:
        sys.dont_write_bytecode = dont_write_bytecode
        sys.path.remove(str(build_lib))
        for name in [name for name in sys.modules if name == "sandboy" or name.startswith("sandboy.")]:
            del sys.modules[name]
        sys.meta_path[:] = [finder for finder in sys.meta_path if type(finder).__module__ != "sandboy"]


class build_py_with_guest_sources(build_py):
    def run(self):
        super().run()
        if self.editable_mode or not GUEST_SOURCES.is_dir():
            return  # an editable install reads adapters/ in the checkout itself
        dest = Path(self.build_lib).joinpath(*GUEST_PACKAGE_DIR)
        shutil.rmtree(dest, ignore_errors=True)
        for path in sorted(GUEST_SOURCES.rglob("*")):
            if path.suffix in (".py", ".wit") and "__pycache__" not in path.parts:
                target = dest / path.relative_to(GUEST_SOURCES)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)


class build_ext_then_bundle(build_ext):
    def run(self):
        super().run()
        if not (self.inplace or self.editable_mode):  # in a checkout `make compile` writes it
            write_run_path_bundle(Path(self.build_lib))


setup(
    cmdclass={"build_py": build_py_with_guest_sources, "build_ext": build_ext_then_bundle},
    ext_modules=[
        Extension(
            "sandboy.confine._native",
            ["src/sandboy/confine/_native.c", "src/sandboy/confine/_native_walk.c",
             "src/sandboy/confine/_native_mac.c"],
            # the size of the source it was built from: `_libc` does not use a build whose source
            # beside it has changed since (a checkout moved on without `make compile`); and of the
            # git check's walk (`gitcheck._native_scan` asks the same of it)
            define_macros=[("NATIVE_SOURCE_SIZE", str((Path(__file__).parent / "src/sandboy/confine/_native.c").stat().st_size)),
                           ("WALK_SOURCE_SIZE", str((Path(__file__).parent / "src/sandboy/confine/_native_walk.c").stat().st_size))],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror=implicit-function-declaration"],
            optional=True,
        )
    ]
)
