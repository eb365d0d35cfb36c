"""What the status report and `sandboy doctor` say is read from what was built or probed, never
a constant: each entry turns false when what it reports is taken away."""

from __future__ import annotations

from sandboy import Policy
from sandboy.confine import cage as cagemod
from sandboy.confine import hygiene, seccomp

POLICY = {"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64"], "exec": ["/usr/bin", "/bin"]}}


def _enforced():
    cage = cagemod.build(Policy.from_mapping(POLICY, "<test>"))
    try:
        return cage.report()["enforced"]
    finally:
        cage.close()


def test_no_new_privs_is_reported_from_the_plan(monkeypatch):
    assert _enforced()["no_new_privs"] is True
    monkeypatch.setattr(hygiene, "plan_no_new_privs", lambda: [])
    assert _enforced()["no_new_privs"] is False


def test_native_arch_only_is_read_from_the_filter(monkeypatch):
    assert _enforced()["seccomp"]["native_arch_only"] is True
    real = seccomp.build
    # the same filter without its first three instructions (the architecture check)
    monkeypatch.setattr(seccomp, "build", lambda *a, **k: real(*a, **k)[24:])
    assert _enforced()["seccomp"]["native_arch_only"] is False


def test_doctor_probes_close_range(monkeypatch):
    from sandboy.confine import doctor

    assert doctor.check()["protections"]["close_range"] is hygiene.close_range_cloexec_works()
    monkeypatch.setattr(hygiene, "close_range_cloexec_works", lambda: False)
    assert doctor.check()["protections"]["close_range"] is False
