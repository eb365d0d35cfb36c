"""Layer 2: confine one command with unprivileged kernel primitives, then execve it.

    cage.py      compiles a policy once, in the parent, into a plan of raw system calls
    reuse.py     when a compiled cage may run another command (API, gate)
    fingerprint.py  what a compiled cage's rules depend on in the file system, and the check
                 that a rebuild would give the same (reuse and plan_cache)
    fingerprint_build.py  its build side: taking one, the stats a build takes before it decides
                 its rules, the protected paths resolved anew (the check's slow way)
    plan_cache.py  `sandboy run`'s compiled plans kept across invocations (exec mode; ADR 0028)
    plan_keep.py  what a miss keeps: the inputs taken before the command runs, the entry written
                 after it (a hit never loads it)
    plan_pieces.py  parts of a build kept apart from the plans (the seccomp program...)
    env_reads.py which environment variables a run reads: the plan cache's environment key
    cache_files.py  files written into Sandboy's own cache directory, placed where no other user
                 can choose, and sealed (`sandboy.cache_seal`: a keyed MAC under this user's key
                 in the kernel's user keyring, ADR 0030; `_native_mac.c` its BLAKE2b in C)
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
    hook_managers.py  which worktree files a repository's hooks run, found without git
                 (core.hooksPath, husky, the hook managers' stubs)
    own_install.py  Sandboy's own installation, read-only where a write root holds it (ADR 0024)
    path_dirs.py the caller's PATH directories inside a write root: protected, or warned about
    path_prefixes.py  what the programs in those directories load (a pyenv version, an nvm node's
                 lib, the user site): read-only like Sandboy's own installation (ADR 0013)
    hook_python.py  the interpreter a pre-commit hook stub runs, where a write root holds it: judged
    gitcheck.py  after a run: git config, hooks or repositories planted for the host's next git
                 command are found and quarantined (ADR 0019) — the launch record and the walk;
    gitjudge.py  its judgement and quarantine, loaded only when a git directory is to be judged
    gitcheck_hook.py  the check around runs: its supervision hook, the scope a run is checked
                 with, what a gate carries from one step's check to the next launch
    walk_index.py  what the last walk found in each directory, kept for the next run's census
    _native_walk.c  the walk (and realpath(3)) in C, with its Python stand-in's decisions
    kernel_mounts.py  the kernel's own file systems mounted below a write root, which a cage refuses
    loosened.py  modes on the way to what the host's git or shell runs, loosened by other users
                 during a run, put back after it
    _libc.py     runs plans: the C executor `_native.c` (vfork, no Python in the child) or
                 the pure-Python one on `_ctypes`, `_libc_python.py` (ADR 0005)
    launch.py    the API: spawn/run a command, choosing how it is supervised
    exec_mode.py the CLI becomes the command; `supervisor_needed`, the one rule for when a run
                 needs a process to stay with it
    init_wait.py exec mode's wait under the tier: the plan's init in a session of its own, waited
                 for in C with the forwarded signals held
    supervision.py  Supervision, the one supervision object (start/stop hooks the egress proxy
                 attaches to; deadline; kill and reap the tree) and the Handle interface
                 (pid, kill, wait) every way of running a command returns (ADR 0020)
    supervisor.py  a supervisor's life (supervise): in the process the API forks, or in `sandboy run`
                 itself under the namespace tier; the forked one's handle
    reaping.py   find, kill and reap every descendant of the supervising process
    result.py    RunResult, the outcome names; a wait status + the child's report -> RunResult
    terminal.py  own session; whether a terminal reaches this process (ADR 0011)
    relay.py     the caller's terminal replaced and relayed, or a fresh pty, in a supervised run
    pids_cgroup.py  a pids cgroup for `limits.processes` as root (a run's own leaf under the tier;
                 the supervisor's or the gate's group otherwise)
    cgroup.py    a gate step's memory cgroup for `limits.memory_mib`, as root
    cleanup.py   removes what a command left in its private {tmp}
    run_tmp.py   a cage's {tmp} host directory, locked while its maker lives; dead makers' swept
    doctor.py    what this machine can enforce
    dry_run.py   `sandboy run --dry-run`: the cage a policy gets here, built and described, nothing run
    explain.py   why a command cannot be executed under a policy, in words a user can act on
"""
