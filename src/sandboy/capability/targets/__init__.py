"""One emitter per agent format, behind one small interface (`target.Target`): the Sandboy step
policy (the one that enforces), Claude Code's and Codex's settings, and the gitignore-syntax files.
`TARGETS`: every target by name. What they share: `target` (the interface, the fidelity statuses)
and `policy_files` (the files no target lets an agent write)."""

from sandboy.capability.targets import claude, codex, ignore, sandboy

TARGETS = {target.name: target for target in (*ignore.TARGETS, claude.Claude(), codex.Codex(), sandboy.SandboyStep())}
