"""Only the optional C accelerator lives here; all metadata is in pyproject.toml.

`sandboy.confine._native` runs a cage plan in the child without Python (docs/performance.md).
It is optional: without a C compiler the build skips it and `sandboy.confine._libc` runs the
same plan in Python, slower (`sandboy doctor` says which one is in use).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "sandboy.confine._native",
            ["src/sandboy/confine/_native.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror=implicit-function-declaration"],
            optional=True,
        )
    ]
)
