"""The mutation check for Layer 3, the egress proxy (`net.domains`; sandboy/egress, ADR on egress):
each of its protections removed in turn — the run's private network namespace, the fallback's
Landlock rule that leaves only the proxy's port, the proxy's domain rules, its refusal of
private addresses, and the run failing closed when the proxy cannot start — and a check must
then fail.

The checks are real runs of curl through the API, in this process (a mutant set with pytest's
monkeypatch is inherited by the forked supervisor that serves the proxy; nothing in production
reads a switch), against a loopback origin that records every request it gets: the host side
says whether a refused request got through. Test names (`*.test`) reach 127.0.0.1 through the
proxy's resolver map, never the machine's DNS. Expectations by hand: HTTP 403 for what the rules
refuse, curl's exit 7 (could not connect) for a direct connection, 125 for a proxy that failed.

Without the namespace, the child's own first steps (loopback up, listen inside) fail and every
run is refused (125): that mutant is killed by the cage failing closed, before any attack (the
printout marks it). Removed together with those steps, the proxy would listen on its fixed
NAMESPACE_PORT on the shared host's loopback, where another run may hold it: not done; the
fallback's own check (a direct connection refused by Landlock) covers the host-network case.

Budget: 5 mutants, one curl run each (and the intact checks): ≈ 3-5 s; bounded at 60 s.
"""

from __future__ import annotations

import os
import sys
import tempfile

import pytest
from mutantkit import CageRefused, first_failure, forget_built_cages, mutant, report, run_mutants, without_call

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "egress"))
from egresskit import Origin  # noqa: E402

from sandboy.confine import namespaces  # noqa: E402

pytestmark = [pytest.mark.needs_kernel, pytest.mark.mutation,
              pytest.mark.skipif(not namespaces.availability()[0],
                                 reason=f"no namespace tier here: {namespaces.availability()[1]}")]

BUDGET_SECONDS = 60
CURL = "/usr/bin/curl"


class Bench:
    def __init__(self, base, origin):
        self.base, self.origin = base, origin
        self.hosts = base / "hosts"
        self.hosts.write_text("127.0.0.1 allowed.test denied.test\n")

    def run(self, script: str, fallback: bool = False, refusal_expected: bool = False, **net):
        """`sh -c script` under a policy with `net`; (returncode, outcome, stdout). A run that did
        not start (125) raises CageRefused unless `refusal_expected`."""
        from sandboy import Policy, run

        policy = {"version": 1, "fs": {"read": ["/usr", "/etc", "/lib", "/lib64", "/bin"],
                                       "exec": ["/usr/bin", "/bin", "/usr/lib"]}, "net": net}
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("SANDBOY_EGRESS_HOSTS", str(self.hosts))
            mp.setenv("SANDBOY_CACHE_DIR", str(self.base / "cache"))
            if fallback:
                mp.setenv(namespaces.FORCE_OFF_ENV, "0")
            forget_built_cages()
            with tempfile.TemporaryFile() as out, open(os.devnull, "wb") as null:
                result = run(["/bin/sh", "-c", script], Policy.from_mapping(policy, "<egress mutants>"),
                             cwd=str(self.base), timeout=30, stdin=null.fileno(), stdout=out.fileno(),
                             stderr=null.fileno())
                out.seek(0)
                text = out.read().decode()
            forget_built_cages()
        if result.returncode == 125 and not refusal_expected:
            raise CageRefused(f"{result.outcome}: {result.error}")
        return result.returncode, result.outcome, text

    def unseen(self, before: int, path: str) -> bool:
        return not any(p == path for _, p in self.origin.seen[before:])


def _code(url: str, *options) -> str:
    return f"{CURL} -sS -m 10 {' '.join(options)} -o /dev/null -w '%{{http_code}}' {url}; echo ' rc='$?"


# --- the checks: each raises AssertionError when the protection did not hold -------------------

def check_domain_rules(bench):
    port, before = bench.origin.port, len(bench.origin.seen)
    rc, _, out = bench.run(_code(f"http://denied.test:{port}/denied"), domains=[f"allowed.test:{port}"],
                           private=["127.0.0.0/8"])
    assert rc == 0 and out.startswith("403"), (rc, out)
    assert bench.unseen(before, "/denied")


def check_private_addresses(bench):
    # allowed by name, but the name resolves to loopback and no net.private range holds it
    port, before = bench.origin.port, len(bench.origin.seen)
    rc, _, out = bench.run(_code(f"http://allowed.test:{port}/private"), domains=[f"allowed.test:{port}"])
    assert rc == 0 and out.startswith("403"), (rc, out)
    assert bench.unseen(before, "/private")


def check_namespace_direct(bench):
    # the policy grants the origin's port too: in the run's own network namespace it reaches nothing
    port, before = bench.origin.port, len(bench.origin.seen)
    rc, _, out = bench.run(_code(f"http://127.0.0.1:{port}/direct", "--noproxy '*'"),
                           domains=[f"allowed.test:{port}"], private=["127.0.0.0/8"], connect_tcp=[port])
    assert rc == 0 and out.endswith(" rc=7\n"), (rc, out)
    assert bench.unseen(before, "/direct")


def check_fallback_direct(bench):
    # without namespaces: Landlock leaves the proxy's port only, whatever connect_tcp says
    port, before = bench.origin.port, len(bench.origin.seen)
    rc, _, out = bench.run(_code(f"http://127.0.0.1:{port}/direct-fallback", "--noproxy '*'"), fallback=True,
                           domains=[f"allowed.test:{port}"], private=["127.0.0.0/8"], connect_tcp=[port])
    assert rc == 0 and out.endswith(" rc=7\n"), (rc, out)
    assert bench.unseen(before, "/direct-fallback")


def check_proxy_failure_fails_closed(bench):
    # fault injected: the proxy's thread cannot start at the first client (as when threads run out)
    from sandboy.egress import service

    def refuse(self, wait=True):
        raise RuntimeError("can't start new thread")

    port = bench.origin.port
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(service.ProxyService, "start", refuse)
        rc, outcome, out = bench.run(_code(f"http://allowed.test:{port}/never"), domains=[f"allowed.test:{port}"],
                                     private=["127.0.0.0/8"], refusal_expected=True)
    assert (rc, outcome) == (125, "cage_error"), (rc, outcome, out)


CHECKS = (check_domain_rules, check_private_addresses, check_namespace_direct, check_fallback_direct,
          check_proxy_failure_fails_closed)


# --- the mutants ----------------------------------------------------------------------------------

def _fallback_keeps_policy_ports(real):
    def compile_egress(job, *args, **kwargs):
        compiled = real(job, *args, **kwargs)
        if compiled.outputs and compiled.outputs["mode"] != "namespace":
            net = compiled.outputs["net"]
            compiled.outputs["net"] = net.replace(connect_tcp=tuple({*net.connect_tcp, *job.resolved.net.connect_tcp}))
        return compiled
    return compile_egress


def _mutants():
    from sandboy.egress import enforcement
    from sandboy.egress import rules, session

    allow_all = rules.Decision(True, "", "mutant: every destination allowed")
    return [mutant(*row) for row in [
        ("the run's own network namespace", enforcement, "attach_to_tier", lambda egress, tier: None),
        ("the fallback's proxy-port-only rule", enforcement, "compile_egress",
         _fallback_keeps_policy_ports(enforcement.compile_egress)),
        ("the domain rules", rules.Rules, "decide", lambda self, host, port: allow_all),
        ("private addresses refused", rules.Rules, "address_refusal", lambda self, address: None),
        ("a proxy that failed fails the run", session.EgressSession, "stop",
         without_call(session.EgressSession, "stop", 0, session, ("refuse", ("result",)))),
    ]]


def test_every_egress_protection_has_a_check_that_fails_without_it(tmp_path):
    if not os.path.exists(CURL):
        pytest.skip("needs curl")
    origin = Origin()
    try:
        bench = Bench(tmp_path, origin)
        # (compile_all imports egress names at call time: the patched ones are seen)
        outcome = run_mutants(_mutants(), lambda _mutant: first_failure(CHECKS, bench), budget_seconds=BUDGET_SECONDS)
    finally:
        origin.close()
    report(outcome, "egress mutants")
