"""Layer 2: confine one command with unprivileged kernel primitives, then execve it.

    cage.py      compiles a policy once, in the parent, into a plan of raw system calls
    reuse.py     when a compiled cage may run another command (API, gate)
    fingerprint.py  what a compiled cage's rules depend on in the file system, and the check
                 that a rebuild would give the same (reuse and plan_cache)
    plan_cache.py  `sandboy run`'s compiled plans kept across invocations (exec mode; ADR 0028)
    landlock.py  filesystem, TCP-port and scope rules (Landlock ABI 1..7), deny splitting
    ruleset.py   the Landlock ruleset fd, made and filled in the parent, and the kernel's numbers
    deny_globs.py  `fs.deny` globs matched at launch, within a budget (only for a policy with one)
    seccomp.py   a hand-built classic-BPF filter (why not libseccomp: ADR 0003)
    protections.py  the table of every protection and one compiler per protection (ADR 0008)
    hygiene.py   the plan's steps for signals, fds, rlimits, capabilities, no_new_privs
    namespaces.py  the namespace tier: user, mount, IPC, PID and network namespaces (ADR 0009)
    namespace_probe.py  whether this kernel lets this uid make the tier (only without a good note)
    netns_listener.py  egress steps in the cage's network namespace: `lo` up, a listener handed back
    protected.py which paths inside a write root stay read-only (.git/config, hooks...; ADR 0013)
    own_install.py  Sandboy's own installation, read-only where a write root holds it (ADR 0024)
    path_dirs.py the caller's PATH directories inside a write root: protected, or warned about
    path_prefixes.py  what the programs in those directories load (a pyenv version, an nvm node's
                 lib, the user site): read-only like Sandboy's own installation (ADR 0013)
    hook_python.py  the interpreter a pre-commit hook stub runs, where a write root holds it: judged
    gitcheck.py  after a run: git config, hooks or repositories planted for the host's next git
                 command are found and quarantined (ADR 0019) — the launch record and the walk;
    gitjudge.py  its judgement and quarantine, loaded only when a git directory is to be judged
    _libc.py     runs plans: the C executor `_native.c` (vfork, no Python in the child) or
                 the pure-Python one on `_ctypes`, `_libc_python.py` (ADR 0005)
    launch.py    the API: spawn/run a command, choosing how it is supervised
    exec_mode.py the CLI becomes the command; `supervisor_needed`, the one rule for when a run
                 needs a process to stay with it
    supervision.py  Supervision, the one supervision object (start/stop hooks the egress proxy
                 attaches to; deadline; kill and reap the tree) and the Handle interface
                 (pid, kill, wait) every way of running a command returns (ADR 0020)
    supervisor.py  a supervisor's life (supervise): in the process the API forks, or in `sandboy run`
                 itself under the namespace tier; the forked one's handle
    reaping.py   find, kill and reap every descendant of the supervising process
    result.py    RunResult, the outcome names; a wait status + the child's report -> RunResult
    terminal.py  own session; whether a terminal reaches this process (ADR 0011)
    relay.py     the caller's terminal replaced and relayed, or a fresh pty, in a supervised run
    cgroup.py    a pids cgroup for `limits.processes` and a gate step's memory cgroup, as root
    cleanup.py   removes what a command left in its private {tmp}
    doctor.py    what this machine can enforce
    dry_run.py   `sandboy run --dry-run`: the cage a policy gets here, built and described, nothing run
    explain.py   why a command cannot be executed under a policy, in words a user can act on
"""
