"""`sandboy gate`: run an untrusted repository's `.007/gate.toml` steps, each in a cage under the
operator's ceiling (docs/gate.md). Modules: config (parse), ceiling, runner, capture (a step's
output, capped), status (the step and gate status names every report writes), console, report,
outputs (where the gate's own files may be written), repository_links (the ceiling's grants never
followed out through the repository's symlinks), cli."""
