"""A test's scenario run in a forked child: joining a cgroup moves the process that joins, and a
supervisor's run changes its environment and fds — never pytest's own process."""

import json
import os


def in_forked_child(scenario) -> dict:
    """What `scenario()` returns (a JSON-able value), computed in a forked child. A child that
    raised fails the test, with its traceback (what it wrote to the pipe)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            try:
                out = json.dumps(scenario()).encode()
                code = 0
            except BaseException:  # noqa: BLE001 — reported to the test, which fails
                import traceback

                out = traceback.format_exc().encode()
            os.write(w, out)
        finally:
            os._exit(code)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, data
    return json.loads(data)
