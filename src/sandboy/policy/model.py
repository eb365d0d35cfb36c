"""Policy records: plain slotted classes. `Policy.load` / `Policy.from_mapping` validate through
`policy.load`, which returns plain values and never imports this module (no import circle); the
policy's sections and keys are `policy.load`'s tables, imported from there.

Why not dataclasses: `dataclasses` imports `re` and `inspect` (≈ 10 ms), and this module is on
the start-up path of every `sandboy run`.
"""

from sandboy.policy.load import DEFAULT_ENV_PASS, LIMIT_KEYS, SECTIONS

__all__ = ["DEFAULT_ENV_PASS", "LIMIT_KEYS", "SECTIONS", "FsRules", "NetRules", "IpcRules", "SeccompRules",
           "EnvRules", "Limits", "Compat", "Policy"]


class _Record:
    """A small immutable-by-convention record with defaults, equality and `replace`."""

    __slots__ = ()
    _defaults: dict = {}

    def __init__(self, **values):
        for name, default in self._defaults.items():
            object.__setattr__(self, name, values.pop(name, default))
        if values:
            raise TypeError(f"{type(self).__name__}: unknown fields {sorted(values)}")

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable; use replace()")

    def replace(self, **changes):
        data = self.to_dict()
        data.update(changes)
        return type(self)(**data)

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self._defaults}

    def __eq__(self, other):
        return type(other) is type(self) and self.to_dict() == other.to_dict()

    def __hash__(self):
        return hash(tuple(self.to_dict().items()))

    def __repr__(self):
        inner = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"{type(self).__name__}({inner})"


class FsRules(_Record):
    """Paths as written (placeholders unresolved); `policy.resolve` makes them absolute.
    `protect`: readable, never writable, even inside a write root; `protect_defaults`: also
    protect `confine.protected.DEFAULT_PROTECTED` in every write root (docs: README)."""

    __slots__ = ("read", "exec", "write", "deny", "protect", "protect_defaults")
    _defaults = {"read": (), "exec": (), "write": (), "deny": (), "protect": (), "protect_defaults": True}


class NetRules(_Record):
    __slots__ = ("connect_tcp", "bind_tcp", "udp", "unix", "domains", "private", "domains_deny", "unrestricted")
    _defaults = {
        "connect_tcp": (),
        "bind_tcp": (),
        "udp": False,
        "unix": False,
        "domains": (),
        "private": (),
        "domains_deny": (),
        "unrestricted": False,
    }

    @property
    def egress(self) -> bool:
        """Layer 3: a private network namespace whose only way out is the domain proxy."""
        return bool(self.domains) and not self.unrestricted


class IpcRules(_Record):
    """`sysv`: SysV shared memory, message queues and semaphores. Refused by seccomp unless true
    (they reach the host's segments by key wherever no IPC namespace is in place)."""

    __slots__ = ("sysv",)
    _defaults = {"sysv": False}


class SeccompRules(_Record):
    __slots__ = ("deny", "allow")
    _defaults = {"deny": (), "allow": ()}


class EnvRules(_Record):
    # `pass` is a keyword in Python, so the attribute is `pass_` (the TOML key stays `pass`).
    __slots__ = ("pass_", "set")
    _defaults = {"pass_": DEFAULT_ENV_PASS, "set": ()}  # set: tuple of (name, value) pairs


class Limits(_Record):
    __slots__ = LIMIT_KEYS
    _defaults = {key: 0 for key in LIMIT_KEYS}


class Compat(_Record):
    __slots__ = ("landlock",)
    _defaults = {"landlock": "best-effort"}


class Policy(_Record):
    """One confined command's policy.

    `sections` records which TOML tables were present: for a standalone `sandboy run` an absent
    section grants nothing (the defaults above), while in a gate step an absent section means
    "as the ceiling" (see `policy.meet`).
    """

    __slots__ = ("version", "fs", "net", "ipc", "seccomp", "env", "limits", "compat", "sections", "source")
    _defaults = {
        "version": 1,
        "fs": FsRules(),
        "net": NetRules(),
        "ipc": IpcRules(),
        "seccomp": SeccompRules(),
        "env": EnvRules(),
        "limits": Limits(),
        "compat": Compat(),
        "sections": frozenset(),
        "source": "<policy>",
    }

    @property
    def network_confined(self) -> bool:
        return not self.net.unrestricted

    @property
    def strict(self) -> bool:
        return self.compat.landlock == "strict"

    @classmethod
    def load(cls, path, use_cache: bool = True, raw: bytes | None = None) -> "Policy":
        """Load and validate a policy file; raises `PolicyError` naming file, key and fix. `raw`:
        the file's bytes where the caller has read them already (`sandboy run`'s plan cache keys
        its entry with exactly the bytes the build parsed: plan_keep.Miss)."""
        import os

        from sandboy.policy.load import read_table

        path = os.fspath(path)
        return cls.from_mapping(read_table(path, use_cache, raw), path)

    @classmethod
    def from_mapping(cls, data: dict, source: str = "<policy>") -> "Policy":
        """Validate an already-parsed TOML table (as `tomllib` returns it)."""
        from sandboy.policy.load import validate

        sections = validate(data, source)
        fields = {name: _RECORDS[name](**values) for name, values in sections.items()}
        return cls(version=1, sections=frozenset(sections), source=source, **fields)

    def to_toml_dict(self) -> dict:
        """The policy as a TOML-shaped dict (for --dry-run, status reports and round trips)."""
        out: dict = {"version": self.version}
        for name in SECTIONS:
            if name not in self.sections:
                continue
            section = getattr(self, name).to_dict()
            if name == "env":
                section = {"pass": list(section["pass_"]), "set": dict(section["set"])}
            out[name] = {k: list(v) if isinstance(v, tuple) else v for k, v in section.items()}
        return out


_RECORDS = {"fs": FsRules, "net": NetRules, "ipc": IpcRules, "seccomp": SeccompRules, "env": EnvRules,
            "limits": Limits, "compat": Compat}
