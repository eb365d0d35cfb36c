"""Write files outside the repository: the operator's home, /etc, /tmp, the repo's parent."""

import os

from _attempt import attempt, finish, operator_home


def write(path: str):
    with open(path, "w") as fh:
        fh.write("written by a gate step\n")
    return f"wrote {path}"


home = operator_home()
for target in (os.path.join(home, ".bashrc"), "/etc/cron.d/gate-demo", "/tmp/gate-demo-pwned",
               os.path.join(os.path.dirname(os.getcwd()), "gate-demo-pwned")):
    attempt(f"write {target}", lambda t=target: write(t))
finish()
