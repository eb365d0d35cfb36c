"""Which repository paths are the policy files (`policy_files.policy_file_of`), and which
write.allow patterns grant nothing but them (`grants_only_policy_files`): pure decisions, checked
without compiling or running anything. Every target leaves such a pattern out (fidelity: lost)
and denies the policy files, so an agent cannot loosen its next run."""

import pytest

from sandboy.capability.model import parse_pattern
from sandboy.capability.targets.policy_files import POLICY_FILES, grants_only_policy_files, policy_file_of


@pytest.mark.parametrize("path, own", [
    ("owen.policy.toml", "owen.policy.toml"),
    (".sandboy", ".sandboy"),
    (".sandboy/agent.toml", ".sandboy"),
    ("/.claude/settings.json", ".claude"),    # spelled with slashes around it: the same path
    (".codex/", ".codex"),
    (".codex/a/b/config.toml", ".codex"),
])
def test_a_policy_file_and_what_lies_in_it_are_named(path, own):
    assert policy_file_of(path) == own


@pytest.mark.parametrize("path", [
    "", ".", "src", "owen.policy.toml.bak", ".sandboyx", ".claude-notes/x", "docs/.claude",
    "a/.sandboy/agent.toml", ".cod", "owen.policy",
])
def test_a_name_sharing_only_a_prefix_or_lying_deeper_is_not_a_policy_file(path):
    # whole components from the repository root: ".claudex" is not in ".claude", and a
    # `.sandboy` below the root is no agent's file
    assert policy_file_of(path) is None


def test_every_policy_file_is_its_own():
    assert [policy_file_of(own) for own in POLICY_FILES] == list(POLICY_FILES)


@pytest.mark.parametrize("text, only", [
    ("/.sandboy", True),
    ("/.sandboy/", True),
    ("/.claude/**", True),
    ("/.codex/config.toml", True),
    ("/owen.policy.toml", True),
    ("/.claude/*.json", True),
    ("src/", False),
    ("/.claudex", False),
    ("/docs/.claude", False),
    (".claude", False),     # unanchored: a `.claude` at any depth, most of them not policy files
    ("/**/.sandboy", False),
    ("/*", False),
    # a '*' continuing a policy file's name matches names that are none: `.claude-notes`,
    # `.sandboyx`, `owen.policy.toml.bak` (the text before the '*' is a prefix, not a name)
    ("/.claude*", False),
    ("/.sandboy*/agent.toml", False),
    ("/owen.policy.toml*", False),
    ("/.codex*", False),
    ("/.claude/settings*", True),   # the '*' continues a name inside `.claude`: all in it
    ("/.claude/*/x", True),
])
def test_write_allow_patterns_granting_only_policy_files(text, only):
    assert grants_only_policy_files(parse_pattern("owen.policy.toml", "write.allow", text)) is only
