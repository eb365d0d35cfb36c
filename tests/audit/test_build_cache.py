"""Build and cache keys: source hash, private cache directory, adapter lookup."""

from __future__ import annotations

import os
import shutil

import pytest

from sandboy.audit import build, registry
from sandboy.audit.errors import UsageError


def test_source_hash_follows_every_source(tmp_path, monkeypatch):
    copy = tmp_path / "adapters"
    shutil.copytree(registry.adapters_root(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("SANDBOY_ADAPTERS_DIR", str(copy))
    spec = registry.ADAPTERS["infer"]
    before = build.source_hash(spec)
    for rel in ("wit/adapter.wit", "common/sandboy_guest.py", "infer/infer_adapter.py"):
        with open(copy / rel, "a") as fh:
            fh.write("\n")
        after = build.source_hash(spec)
        assert after != before, rel
        before = after
    (copy / "bandit" / "bandit_adapter.py").write_text("# unrelated change\n")
    assert build.source_hash(spec) == before


def test_missing_adapter_sources_say_how_to_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBOY_ADAPTERS_DIR", str(tmp_path))
    with pytest.raises(UsageError, match="SANDBOY_ADAPTERS_DIR"):
        registry.adapters_root()


def test_cache_dir_must_be_private(tmp_path, monkeypatch):
    shared = tmp_path / "shared-cache"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(shared))
    with pytest.raises(UsageError, match="chmod 700"):
        build.cache_dir("cwasm")


def test_cache_dir_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("SANDBOY_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert build.cache_dir() == tmp_path / "xdg" / "sandboy"
    assert oct((tmp_path / "xdg" / "sandboy").stat().st_mode & 0o777) == "0o700"


def test_unknown_tool_lists_known_ones():
    with pytest.raises(UsageError, match="infer.*semgrep"):
        registry.adapter_for_tool("nope")
    assert registry.adapter_for_tool("roslyn").name == "passthrough"


def test_every_adapter_has_sources():
    for spec in registry.ADAPTERS.values():
        files = registry.source_files(spec)
        assert files[0].name == "adapter.wit" and any(f.name == "app.py" for f in files)



@pytest.mark.parametrize("variable", ["SANDBOY_CACHE_DIR", "XDG_CACHE_HOME", "HOME"])
def test_one_cache_rule_for_policies_components_and_the_cage(variable, monkeypatch, tmp_path):
    """ADR 0006: the cage keeps commands out of the directory the components live in, found by
    `cache_places.cache_dir`; the components, the policy parse cache and the cage's deny must all be
    where that rule says, whichever variable decides (a copy of the rule that disagreed would
    leave the components reachable from a cage)."""
    from sandboy.cache_places import cache_dir
    from sandboy.confine.protections import _own_cache_dir
    from sandboy.policy.load import _cache_path

    for name in ("SANDBOY_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    base = tmp_path / "base"
    base.mkdir(mode=0o700)
    monkeypatch.setenv(variable, str(base))
    components = build.cache_dir("components")
    assert components == build.Path(cache_dir()) / "components"
    assert str(components).startswith(str(base) + "/")
    assert _own_cache_dir() == os.path.realpath(components.parent)  # what every cage is denied
    assert os.path.dirname(os.path.dirname(_cache_path("p.toml"))) == str(components.parent)  # parsed policies
