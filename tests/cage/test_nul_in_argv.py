"""A NUL byte in argv or the environment is a clear ValueError from spawn, supervised or not.

Unsupervised, the cage's `exec_args` said so; supervised (a timeout, `audit run`'s phases) the
same check ran in the forked supervisor, which died of it: the run came back as cage_error 125
"the sandboy supervisor died" (a repository's adapters.toml `argv = ["sh", "-c", "x\\u0000y"]`
found it; toolconfig now refuses that at load)."""

from __future__ import annotations

import pytest

import sandboy
from sandboy.confine.launch import spawn

POLICY = {"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/bin"], "exec": ["/usr/bin", "/bin"]}}


@pytest.mark.parametrize("how", [{}, {"supervise": True}, {"timeout": 5}])
def test_a_nul_byte_is_a_value_error_whoever_runs_it(how) -> None:
    policy = sandboy.Policy.from_mapping(POLICY)
    with pytest.raises(ValueError, match="must not contain NUL bytes"):
        spawn(["sh", "-c", "echo x\0y"], policy, **how)
    # the twin: the same run without the NUL byte
    result = spawn(["sh", "-c", "exit 7"], policy, **how).wait()
    assert result.returncode == 7
