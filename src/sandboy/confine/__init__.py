"""Layer 2: confine one command with unprivileged kernel primitives, then execve it.

    landlock.py  filesystem, TCP-port and scope rules (Landlock ABI 1..7)
    seccomp.py   a hand-built classic-BPF denylist (why not libseccomp: FINDINGS.md, 64-bit compare bypass)
    hygiene.py   fds, environment, rlimits, capabilities, no_new_privs
    cage.py      builds every rule once in the parent; `apply()` runs in the child before execve
    launch.py    exec mode (CLI), supervised mode, and the Python API (`spawn`, `run`)
    doctor.py    what this machine can enforce
"""
