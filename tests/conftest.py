"""The whole suite's own Sandboy cache directory (tests/test_suite_cache.py checks it).

Tests run `sandboy run` and `sandboy.run` by the hundred. Without this, every run that a test
did not give a SANDBOY_CACHE_DIR of its own wrote into the operator's real cache
(~/.cache/sandboy): plan-cache entries (`plans/`, ADR 0028), parse-cache entries (`policies/`:
15,677 of them here after session 8), the namespace probe's note — and a test could read an
entry an earlier run of another checkout left there.

So before any test module is imported (pytest_configure of the root conftest runs before the
other conftests are read: tests/audit/conftest.py read the variable at import), the suite gets
a private cache directory, made 0700 beside the real one (same file system, same reach from the
tests' policies: a policy granting the home or ~/.cache sees it where it would see the real one)
and removed at the end. Only what is slow to make and keyed by what it is made from is shared,
by a symlink into the real cache:

  - `components/`: the adapters built by componentize-py, keyed by the sha256 of their sources
    (audit/build.py; minutes per adapter on a loaded 2-core machine);
  - `cwasm/`: their native code, keyed by the component's sha256, wasmtime's version and the
    engine settings (audit/host.py; tens of seconds each);
  - `timings/`: how long the last build and compile took here (only the progress line's guess).

Everything else (`plans/`, `policies/`, `namespaces-ok-*`) is made fresh in the private directory.
A test that sets its own SANDBOY_CACHE_DIR (monkeypatch, a subprocess's env) still gets its own.
"""

from __future__ import annotations

import os
import shutil

import pytest

from cachekit import STATE, new_entries_naming, prepare


def pytest_configure(config: pytest.Config) -> None:
    if not STATE:
        prepare()
    # The hang-up tests send SIGHUP to `sandboy run`/`sandboy gate` and expect them to end; under
    # `nohup` every child inherits SIGHUP ignored, and Sandboy rightly keeps running when told to
    # ignore hang-ups (8 tests failed so in a nohup'd suite, session 14). The suite's children
    # start from the default disposition instead.
    import signal

    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


def pytest_unconfigure(config: pytest.Config) -> None:
    private = STATE.get("private")
    if private:
        shutil.rmtree(private, ignore_errors=True)  # (the links are removed, never followed)


@pytest.fixture(scope="session", autouse=True)
def suite_cache_dir() -> str:
    """The suite's private cache directory; checks no test left the variable changed for the rest."""
    yield STATE["private"]
    assert os.environ.get("SANDBOY_CACHE_DIR") == STATE["private"], "a test changed SANDBOY_CACHE_DIR for the session"


@pytest.fixture(scope="session")
def real_cache_dir() -> str:
    """The operator's real cache directory (shared components live there)."""
    return STATE["real"]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The suite leaves no entry of its own in the real cache: a run that escaped the private
    directory (a subprocess given an environment without it, and without HOME) fails the session."""
    if not STATE:
        return
    # Entries naming this session's base temporary directory: the checkout's own path would also
    # match a `make demo` or a `sandboy run` of the operator's in the same checkout meanwhile,
    # which rightly use the real cache (a test running from the checkout itself is not seen here;
    # tests/test_suite_cache.py checks the mechanism).
    factory = getattr(session.config, "_tmp_path_factory", None)
    base = getattr(factory, "_basetemp", None) if factory is not None else None
    if base is None:
        return
    leaked = new_entries_naming([str(base).encode()])
    if leaked:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        text = ("the suite wrote into the operator's real Sandboy cache (give that run the suite's "
                "SANDBOY_CACHE_DIR):\n  " + "\n  ".join(leaked))
        if reporter is not None:
            reporter.write_line(text, red=True)
        else:
            print(text)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
