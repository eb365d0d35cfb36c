#!/usr/bin/env python3
"""`make demo`: Sandboy on bundled examples.

1. `sandboy run`: one honest action and several hostile ones in one cage (examples/run-demo).
2. `sandboy gate`: an untrusted repository's gate, every step in its own cage (examples/gate-demo).
3. `sandboy audit`: a real analyser (Bandit) run confined over that repository, its report turned
   into validated SARIF by a WebAssembly adapter (examples/audit_demo.py).

A throwaway HOME with a planted fake SSH key stands in for the developer's machine; nothing
outside temporary directories is touched.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
FAKE_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nFAKE-DEMO-KEY-NOT-A-SECRET\n-----END OPENSSH PRIVATE KEY-----\n"

POLICY = """\
# Written by examples/demo.py: the interpreter paths depend on this machine.
version = 1

[fs]
read  = ["/usr", "/lib", "/lib64", "/etc", "/proc", "{python_prefix}", "."]
exec  = ["/usr/bin", "/bin", "{python_bin}"]
write = ["."]
deny  = [".env"]

[net]
connect_tcp = [{allowed_port}]   # the only TCP port the command may reach
udp = false

[env]
pass = ["PATH", "HOME", "LANG"]
"""


def banner(text: str) -> None:
    print(f"\n=== {text} ===", flush=True)


def plant_home(root: str) -> str:
    home = os.path.join(root, "home")
    os.makedirs(os.path.join(home, ".ssh"), mode=0o700)
    with open(os.path.join(home, ".ssh", "id_ed25519"), "w") as fh:
        fh.write(FAKE_KEY)
    os.chmod(os.path.join(home, ".ssh", "id_ed25519"), 0o600)
    with open(os.path.join(home, ".bashrc"), "w") as fh:
        fh.write("# demo\n")
    return home


def run_demo(root: str, home: str) -> int:
    banner("sandboy run: one cage, one honest action, hostile attempts")
    workspace = os.path.join(root, "workspace")
    # `out/` exists before the run: a deny (.env here) splits its directory, and Landlock cannot
    # grant "everything new in this directory except .env" (README: fs.deny).
    os.makedirs(os.path.join(workspace, "out"))
    with open(os.path.join(workspace, ".env"), "w") as fh:
        fh.write("API_TOKEN=demo\n")
    allowed = socket.create_server(("127.0.0.1", 0))
    denied = socket.create_server(("127.0.0.1", 0))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    sibling = subprocess.Popen(["sleep", "60"])
    try:
        prefix = os.path.realpath(sys.base_prefix)
        python = os.path.realpath(sys.executable)
        policy_path = os.path.join(root, "demo-policy.toml")
        with open(policy_path, "w") as fh:
            fh.write(POLICY.format(python_prefix=prefix, python_bin=os.path.dirname(python),
                                   allowed_port=allowed.getsockname()[1]))
        print(f"policy: {policy_path}")
        print(open(policy_path).read())
        attacker = os.path.join(workspace, "attacker.py")
        shutil.copy(os.path.join(HERE, "run-demo", "attacker.py"), attacker)
        argv = [SANDBOY, "run", "--policy", policy_path, "--", python, "-I", "attacker.py",
                str(allowed.getsockname()[1]), str(denied.getsockname()[1]), str(udp.getsockname()[1]),
                str(sibling.pid)]
        print("$ sandboy run --policy demo-policy.toml -- python attacker.py ...", flush=True)
        env = dict(os.environ, HOME=home)
        code = subprocess.run(argv, cwd=workspace, env=env).returncode
        udp.setblocking(False)
        try:
            leaked = udp.recv(65536)
        except BlockingIOError:
            leaked = b""
        with open(os.path.join(home, ".bashrc")) as fh:
            bashrc = "unchanged" if fh.read() == "# demo\n" else "MODIFIED"
        print(f"host side: the UDP listener received {len(leaked)} bytes; ~/.bashrc {bashrc}")
        return code if not leaked else 1
    finally:
        sibling.kill()
        sibling.wait()
        for s in (allowed, denied, udp):
            s.close()


def gate_demo(home: str) -> int:
    banner("sandboy gate: an untrusted repository's .007/gate.toml, each step in its own cage")
    repo = os.path.join(HERE, "gate-demo")
    if not os.path.isdir(repo):
        print("(examples/gate-demo is missing)")
        return 1
    # Checked out under the (throwaway) home, as a developer's repository would be: the hostile
    # steps look for the key there (a step's own HOME is a private, empty directory).
    checkout = os.path.join(home, "src", "gate-demo")
    shutil.copytree(repo, checkout)
    env = dict(os.environ, HOME=home)
    print(f"$ sandboy gate {os.path.relpath(repo)}   # a copy in the throwaway home", flush=True)
    return subprocess.run([SANDBOY, "gate", checkout], env=env).returncode


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="sandboy-demo-") as root:
        home = plant_home(root)
        codes = [run_demo(root, home), gate_demo(home)]
        from audit_demo import audit_demo  # prints its own banner

        codes.append(audit_demo(SANDBOY, root))
    banner("summary")
    print("run demo:  " + ("every hostile attempt refused, honest work done" if codes[0] == 0 else "UNEXPECTED RESULT"))
    print("gate demo: " + ("honest step passed, hostile steps refused" if codes[1] == 0 else "UNEXPECTED RESULT"))
    print("audit demo: " + ("analyser confined, SARIF converted and validated" if codes[2] == 0 else "UNEXPECTED RESULT"))
    return 0 if codes == [0, 0, 0] else 1


if __name__ == "__main__":
    sys.exit(main())
