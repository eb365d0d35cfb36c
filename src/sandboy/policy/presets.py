"""Built-in presets a policy can include: `include = ["system", "python"]`.

A preset is a set of file rules (`fs.read`, `fs.exec`, `fs.deny`) that a common kind of job
needs, resolved on THIS machine when the policy is loaded: `python` finds the interpreters on
`PATH`, follows their symlinks (a venv's `python` points into pyenv, /usr or /opt), and reads the
venv's `pyvenv.cfg` to find the base interpreter and its standard library. Without that, a venv's
`python` dies with `Permission denied` (its symlink target is not in `fs.exec`) or with
`No module named 'encodings'` (the stdlib is not in `fs.read`).

A preset only grants reading and executing: writing, the network and limits stay explicit in the
policy. The preset's paths are added in front of the policy's own lists; `fs.deny` still wins.
`sandboy run --dry-run` shows the result. Only paths that exist here are added.
"""

import os

from sandboy.policy.lookups import ask, real_path, unsure
from sandboy.confine._libc import path_candidates

# Every question about the machine goes through `ask` (policy/lookups.py): the rules are then a
# function of its recorded answers, which a plan cache hit asks again without this module.

# Host secrets under /etc that `system` (and the gate's built-in ceiling) never grant. The cage
# expands a deny inside a granted directory into grants for its siblings.
ETC_SECRETS = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssh",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/security/opasswd",
    "/etc/ssl/private",      # TLS private keys
    "/etc/krb5.keytab",      # Kerberos host keys
    "/etc/libvirt/secrets",
    "/etc/NetworkManager/system-connections",  # Wi-Fi and VPN passwords
)

SYSTEM_READ = ("/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/proc", "/dev", "/opt")
SYSTEM_EXEC = ("/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/lib", "/lib", "/lib64",
               "/usr/libexec")


def _variable(environ, name: str):
    """`environ[name]` or None; asked (recorded) where `environ` is this process's own."""
    if environ is os.environ:
        return ask("env", name)
    unsure()  # another mapping (a test's, a caller's): not this process's to ask again
    return environ.get(name)


def _absolute(path: str) -> str:
    """os.path.abspath, whose working directory is asked (recorded) where `path` is relative."""
    if path.startswith("/"):
        return os.path.normpath(path)
    return os.path.normpath(os.path.join(ask("cwd", ""), path))


class Rules:
    """Paths gathered by a preset, in order, without duplicates."""

    __slots__ = ("read", "exec", "deny")

    def __init__(self):
        self.read, self.exec, self.deny = [], [], []

    def add(self, kind: str, path: str) -> None:
        items = getattr(self, kind)
        if path and path not in items and (path.startswith("{") or ask("exists", path)):
            items.append(path)

    def merge(self, other: "Rules") -> None:
        """`other`'s paths after these, without duplicates (each was checked by `other.add`)."""
        for kind in ("read", "exec", "deny"):
            items = getattr(self, kind)
            items.extend(path for path in dict.fromkeys(getattr(other, kind)) if path not in items)


def which_all(name: str, path_var: str | None) -> list[str]:
    """Every `name` on PATH, in order (not only the first: a later one may be what a shell runs
    once the first is refused); `path_var` None: PATH unset, the executor's default search."""
    found = []
    for candidate in path_candidates(name, path_var):
        # Absolute PATH entries only: a relative one (`.`, or an empty entry, which is `.`: a
        # trailing `:` in PATH) is the working directory, often an untrusted checkout, whose own
        # `python3 -> ANY/bin/tool` then granted read on ANY (the program's installation prefix):
        # session 7. A program found there gets no grant from a preset (its exec is refused).
        if not candidate.startswith("/"):
            continue
        if candidate not in found and ask("program", candidate):
            found.append(candidate)
    return found


def symlink_chain(path: str, real: str | None = None) -> list[str]:
    """`path` and every path its symlinks lead to, up to the final file (`real`: its realpath,
    when the caller has it already)."""
    chain = [_absolute(path)]
    for _ in range(40):
        current = chain[-1]
        if not ask("islink", current):
            break
        target = ask("readlink", current)
        chain.append(os.path.normpath(os.path.join(os.path.dirname(current), target)))
    if real is None:
        real = real_path(path)
    if real not in chain:
        chain.append(real)
    return chain


def _add_program(rules: Rules, path: str, read_prefix: bool) -> None:
    """Execute rights for `path`, each symlink hop's directory and the real file's directory;
    with `read_prefix`, read rights for the installation it lives in (bin/..)."""
    parts = _absolute(path).split(os.sep)
    if "shims" in parts and ".pyenv" in parts:
        # A pyenv shim is a script that runs $PYENV_ROOT/libexec/pyenv, which picks a version
        # from files under the root: the whole (read-only) root is what it needs.
        root = os.sep.join(parts[: parts.index(".pyenv") + 1])
        rules.add("read", root)
        for sub in ("bin", "libexec", "shims", "plugins", "versions"):
            rules.add("exec", os.path.join(root, sub))
    real = real_path(path)  # once: posixpath.realpath walks every component in Python
    for hop in symlink_chain(path, real):
        rules.add("exec", os.path.dirname(hop))
        rules.add("read", os.path.dirname(hop))
    if read_prefix:
        prefix = os.path.dirname(os.path.dirname(real))
        if prefix != "/":
            rules.add("read", prefix)


def _add_venv(rules: Rules, venv: str) -> None:
    rules.add("read", venv)
    rules.add("exec", os.path.join(venv, "bin"))
    for python in ("python3", "python"):
        candidate = os.path.join(venv, "bin", python)
        if ask("exists", candidate):
            _add_program(rules, candidate, read_prefix=True)
    home = ask("venv_home", venv)  # the base interpreter's bin directory (pyvenv.cfg's `home = ...`)
    if home:
        rules.add("exec", home)
        rules.add("read", os.path.dirname(home.rstrip("/")))


def system(environ) -> Rules:
    rules = Rules()
    for path in SYSTEM_READ:
        rules.add("read", path)
    for path in SYSTEM_EXEC:
        rules.add("exec", path)
    for path in ETC_SECRETS:
        rules.add("deny", path)
    return rules


def python(environ, project_venv: bool = True) -> Rules:
    """The interpreters on PATH (and their symlink targets and installation), the active venv
    ($VIRTUAL_ENV), a `.venv` in the current directory (unless `project_venv` is False), and the
    interpreter running Sandboy."""
    rules = Rules()
    for name in ("python3", "python"):
        for path in which_all(name, _variable(environ, "PATH")):
            _add_program(rules, path, read_prefix=True)
    venv = _variable(environ, "VIRTUAL_ENV")
    if venv and ask("isdir", venv):
        _add_venv(rules, venv)
    for prefix in dict.fromkeys((ask("sys", "prefix"), ask("sys", "base_prefix"))):
        rules.add("read", prefix)
        rules.add("exec", os.path.join(prefix, "bin"))
    _add_program(rules, ask("sys", "executable"), read_prefix=True)
    cwd = ask("cwd", "")
    if project_venv and ask("isfile", os.path.join(cwd, ".venv", "pyvenv.cfg")):
        _add_project_venv(rules, os.path.join(cwd, ".venv"))
    return rules


def _add_project_venv(rules: Rules, venv: str) -> None:
    """The working directory's `.venv`, which may come with an untrusted checkout: its
    `pyvenv.cfg` `home` and its `bin/python3` symlink name whatever the checkout wants, and each
    became a grant — `home = /bin` read all of `/`, `bin/python3 -> ~/.ssh/id_rsa` read
    `~/.ssh`. So it adds only paths inside itself, or inside what the rules already read (the
    interpreters on PATH, $VIRTUAL_ENV's, Sandboy's own and their installations): a venv made
    from one of those works as before; one whose base interpreter is none of them gets no grant
    for it (add its installation to fs.read)."""
    from sandboy.paths import is_within, is_within_any

    real = real_path(venv)
    if not is_within(real, real_path(ask("cwd", ""))):
        return  # `.venv` a symlink out of the working directory: not the project's
    trusted = [real_path(p) for p in rules.read]
    found = Rules()
    _add_venv(found, venv)
    for kind in ("read", "exec"):
        for path in getattr(found, kind):
            target = real_path(path)
            if is_within(target, real) or is_within_any(target, trusted):
                rules.add(kind, path)


def git(environ) -> Rules:
    rules = Rules()
    for path in which_all("git", _variable(environ, "PATH"))[:1]:
        _add_program(rules, path, read_prefix=False)
    for path in ("/usr/lib/git-core", "/usr/libexec/git-core"):
        rules.add("exec", path)
        rules.add("read", path)
    for path in ("/usr/share/git-core", "/etc/gitconfig", "/usr/share/perl", "/usr/share/perl5"):
        rules.add("read", path)
    return rules


def node(environ) -> Rules:
    """`node`, `npm` and `npx` on PATH, their symlink targets and installation (an nvm or
    /usr/local prefix holds npm in lib/node_modules)."""
    rules = Rules()
    for name in ("node", "npm", "npx"):
        for path in which_all(name, _variable(environ, "PATH"))[:1]:
            _add_program(rules, path, read_prefix=True)
    for path in ("/usr/share/nodejs", "/usr/lib/nodejs", "/usr/share/node_modules"):
        rules.add("read", path)
    return rules


PRESETS = {"system": system, "python": python, "git": git, "node": node}


def expand(names, environ=None, project_venv: bool = True) -> dict:
    """{"read": [...], "exec": [...], "deny": [...]} for the named presets, in order.
    `project_venv=False`: the working directory's `.venv` is not the caller's own — it may be an
    untrusted checkout (`audit run` on `.`), whose `.venv/pyvenv.cfg` `home = /root/...` made
    that host directory readable and executable to the repository's own tool."""
    environ = os.environ if environ is None else environ
    total = Rules()
    for name in names:
        total.merge(python(environ, project_venv) if name == "python" else PRESETS[name](environ))
    return {"read": total.read, "exec": total.exec, "deny": total.deny}
