"""The capability policy: one committed `owen.policy.toml`, compiled into every AI agent's ignore
and permission files and into a Sandboy step policy that enforces it (docs/capability.md).

Modules: `model` (the policy and its one path-matching rule), `targets` (one emitter per agent
format), `fidelity` (what each target enforces, advises or loses), `compiler` (write / check),
`explain` (one path, every target), `cli` (`sandboy policy ...`). Never on `sandboy run`'s path."""
