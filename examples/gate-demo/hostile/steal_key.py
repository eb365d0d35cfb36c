"""Read the operator's SSH private key."""

import os

from _attempt import attempt, finish, operator_home

home = operator_home()
key = os.path.join(home, ".ssh", "id_ed25519")
print(f"key file exists: {os.path.exists(key)} ({key})", flush=True)
attempt("read /etc/shadow", lambda: open("/etc/shadow").read()[:40])
attempt(f"list {home}/.ssh", lambda: os.listdir(os.path.join(home, ".ssh")))
attempt(f"read {key}", lambda: open(key).read()[:40])
finish()
