"""The capability policy: one committed `owen.policy.toml`, compiled into every AI agent's ignore
and permission files and into a Sandboy step policy that enforces it (docs/capability.md).

Modules: `model` (the policy and its one path-matching rule), `targets` (one emitter per agent
format, each saying what it enforces, advises or loses: `targets/target.py`; the policy files no
target lets an agent write: `targets/policy_files.py`), `compiler` (write / check), `explain` (one
path, every target), `cli` (`sandboy policy ...`). Never on `sandboy run`'s path."""
