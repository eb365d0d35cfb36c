"""The policy's sections and keys, shared by the records (`policy.model`) and the validator
(`policy.load`), so that neither has to import the other."""

SECTIONS = ("fs", "net", "ipc", "seccomp", "env", "limits", "compat")
DEFAULT_ENV_PASS = ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "TZ")
LIMIT_KEYS = ("wall_seconds", "cpu_seconds", "memory_mib", "processes", "open_files", "file_size_mib")
