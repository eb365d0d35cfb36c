"""Finding out whether this kernel lets this uid make the namespace tier (`namespaces.
availability`): the userns sysctls, then a real child running the tier's first steps, and the
note that remembers a good answer for this boot and uid. Loaded only when no such note exists,
so not on a run's path.
"""

import os

from sandboy.confine import _libc, namespaces
from sandboy.confine._libc import AT_FDCWD, SYS_MOUNT, SYS_MOUNT_SETATTR
from sandboy.confine.namespaces import (
    ALL,
    AT_RECURSIVE,
    MOUNT_ATTR_RDONLY,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_REC,
    PROC_OPTIONS,
    _mount_attr,
    plan_user_map,
)


def static_refusal():
    """Why this kernel would refuse unprivileged namespaces, read from sysctls, or None."""
    checks = (("/proc/sys/user/max_user_namespaces", "user.max_user_namespaces = 0"),
              ("/proc/sys/kernel/unprivileged_userns_clone", "kernel.unprivileged_userns_clone = 0"))
    for path, reason in checks:
        try:
            if _libc.read_file(path).strip() == b"0":
                return reason
        except OSError:
            pass
    return None


def remember_good() -> None:
    text = namespaces.note_body()  # (written now, in this boot: its sealed time says so)
    # relative to a cache directory no other user chooses (`cache_files`: a `.tmp` opened by
    # path followed a link planted where another user swapped the directory, session 11)
    from sandboy.confine.cache_files import write_file

    write_file(*os.path.split(namespaces._note_path()), text)


def probe():
    labelled = plan_user_map(os.geteuid(), os.getegid()) + [
        ("make / private", (SYS_MOUNT, 0, None, b"/\0", None, MS_REC | MS_PRIVATE, None)),
        ("mount /proc", (SYS_MOUNT, 0, b"proc\0", b"/proc\0", b"proc\0", MS_NOSUID | MS_NODEV | MS_NOEXEC, PROC_OPTIONS)),
        ("make every mount read-only", (SYS_MOUNT_SETATTR, 0, AT_FDCWD, b"/\0", AT_RECURSIVE,
                                        _mount_attr(MOUNT_ATTR_RDONLY), 32)),
        ("mount /dev", (SYS_MOUNT, 0, b"tmpfs\0", b"/dev\0", b"tmpfs\0", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)),
    ]
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    try:
        pid = _libc.fork_exec([step for _, step in labelled], [b"/"], [b"probe"], [], err_w, ALL)
    except OSError as exc:
        os.close(err_r)
        return f"clone: {exc.strerror}"
    finally:
        os.close(err_w)
    report = _libc.read_all(err_r)  # ends when the child exits (closes err_r)
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass  # the kernel reaped it (the caller ignores SIGCHLD): the report above is the answer
    error, _ = _libc.read_child_report(report)
    if error is None:
        return "the probe child reported nothing"
    index, err = error
    if index >= 0:
        return f"{labelled[index][0]}: {os.strerror(err)}"
    return None  # every step worked; only the exec of "/" failed, as intended
