"""Real tools through the egress cage: `pip install` from a local package index, `git clone` over
SSH from a local sshd. Everything on loopback; test names point at 127.0.0.1 via the hosts map."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import zipfile

import pytest

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")


def _wheel(directory, name="tinypkg", version="1.0") -> str:
    """A minimal, valid pure-Python wheel (RECORD hashes included)."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"MESSAGE = 'installed through the sandboy proxy'\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: sandboy-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    filename = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, filename), "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return filename


class Index:
    """A PEP 503 simple index over HTTPS (a test-made CA), so pip goes through CONNECT + SNI."""

    def __init__(self, root):
        import ssl

        from egresskit import make_ca_and_cert

        root.mkdir()
        self.ca, cert, key = make_ca_and_cert(root, ["pypi.test"])
        self.root = root
        pkg = root / "simple" / "tinypkg"
        pkg.mkdir(parents=True)
        filename = _wheel(str(pkg))
        (pkg / "index.html").write_text(f'<html><body><a href="{filename}">{filename}</a></body></html>\n')
        handler = lambda *a, **kw: http.server.SimpleHTTPRequestHandler(*a, directory=str(root), **kw)  # noqa: E731
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _policy_file(tmp_path, domains, extra_read=(), env_set=None):
    read = ["/usr", "/etc", "/lib", "/lib64", "/bin", sys.prefix, sys.base_prefix, *extra_read]
    lines = ["version = 1", "[fs]", f"read = {json.dumps(read)}",
             f'exec = {json.dumps(["/usr/bin", "/bin", "/usr/lib", sys.prefix, sys.base_prefix])}',
             'write = ["{tmp}", "."]', "[net]", f"domains = {json.dumps(domains)}", 'private = ["127.0.0.0/8"]',
             "[env]", 'pass = ["PATH", "LANG"]']
    env_set = {"HOME": "{tmp}", **(env_set or {})}
    lines.append("set = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env_set.items()) + " }")
    path = tmp_path / "policy.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _hosts(tmp_path, *names):
    path = tmp_path / "hosts"
    path.write_text("127.0.0.1 " + " ".join(names) + "\n")
    return path


def test_pip_install_from_a_local_index_through_the_proxy(tmp_path):
    index = Index(tmp_path / "index")
    try:
        work = tmp_path / "work"
        work.mkdir()
        policy = _policy_file(tmp_path, [f"pypi.test:{index.port}"], extra_read=[index.ca])
        env = dict(os.environ, SANDBOY_EGRESS_HOSTS=str(_hosts(tmp_path, "pypi.test")),
                   SANDBOY_CACHE_DIR=str(tmp_path / "cache"))
        log = tmp_path / "egress.jsonl"
        proc = subprocess.run(
            [SANDBOY, "run", "--policy", str(policy), "--egress-log", str(log), "--", sys.executable, "-m", "pip",
             "install", "--no-cache-dir", "--disable-pip-version-check", "--target", "site", "--cert", index.ca,
             "--index-url", f"https://pypi.test:{index.port}/simple/", "tinypkg"],
            capture_output=True, text=True, env=env, cwd=work, timeout=180)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert (work / "site" / "tinypkg" / "__init__.py").exists()
        decisions = [json.loads(line) for line in log.read_text().splitlines()]
        assert decisions and all(d["decision"] == "allow" and d["host"] == "pypi.test" and d["via"] == "connect"
                                 for d in decisions)
        # the same install from an index the policy does not list is refused
        log2 = tmp_path / "egress2.jsonl"
        proc = subprocess.run(
            [SANDBOY, "run", "--policy", str(policy), "--egress-log", str(log2), "--", sys.executable, "-m", "pip",
             "install",
             "--no-cache-dir", "--disable-pip-version-check", "--target", "site2", "--retries", "0",
             "--timeout", "5", "--cert", index.ca, "--index-url", f"https://other.test:{index.port}/simple/",
             "tinypkg"],
            capture_output=True, text=True, env=env, cwd=work, timeout=180)
        assert proc.returncode != 0 and not (work / "site2" / "tinypkg").exists()
        refused = [json.loads(line) for line in log2.read_text().splitlines()]
        assert refused and {(d["decision"], d["host"]) for d in refused} == {("deny", "other.test")}
    finally:
        index.close()


SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)


@pytest.fixture
def sshd(tmp_path):
    """An sshd on a loopback port with a test-made host key, serving a bare git repository to a
    test-made client key (as the current user)."""
    if SSHD is None or shutil.which("ssh-keygen") is None:
        pytest.skip("openssh-server is not installed (.ci/run installs it)")
    d = tmp_path / "sshd"
    d.mkdir()
    os.chmod(d, 0o700)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "host_key")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "client_key")], check=True)
    (d / "authorized_keys").write_text((d / "client_key.pub").read_text())
    os.chmod(d / "authorized_keys", 0o600)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = d / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\nPidFile {d / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\nSubsystem sftp internal-sftp\n")
    os.makedirs("/run/sshd", exist_ok=True)  # privilege separation directory Debian's sshd wants
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    repo = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(repo)], check=True)
    seed = tmp_path / "seed"
    subprocess.run(["git", "init", "-q", str(seed)], check=True)
    (seed / "README").write_text("cloned over ssh through the sandboy proxy\n")
    git = ["git", "-C", str(seed), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "seed"], check=True)
    subprocess.run([*git, "push", "-q", str(repo), "HEAD:refs/heads/main"], check=True)
    known = d / "known_hosts"
    known.write_text(f"[git.test]:{port} " + (d / "host_key.pub").read_text().split(" ", 2)[0] + " "
                     + (d / "host_key.pub").read_text().split(" ", 2)[1] + "\n")
    yield {"port": port, "repo": repo, "dir": d, "known": known}
    proc.terminate()
    proc.wait(10)


def test_git_clone_over_ssh_through_the_proxy(tmp_path, sshd):
    port, d = sshd["port"], sshd["dir"]
    ssh = (f"ssh -i {d / 'client_key'} -o UserKnownHostsFile={sshd['known']} -o StrictHostKeyChecking=yes "
           "-o BatchMode=yes")
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, SANDBOY_EGRESS_HOSTS=str(_hosts(tmp_path, "git.test", "other.test")),
               SANDBOY_CACHE_DIR=str(tmp_path / "cache"))
    user = os.environ.get("USER") or "root"
    policy = _policy_file(tmp_path, [f"git.test:{port}"], extra_read=[str(d)], env_set={"GIT_SSH_COMMAND": ssh})
    log = tmp_path / "egress.jsonl"
    proc = subprocess.run([SANDBOY, "run", "--policy", str(policy), "--egress-log", str(log), "--", "git", "clone",
                           "-q", f"ssh://{user}@git.test:{port}{sshd['repo']}", "clone"],
                          capture_output=True, text=True, env=env, cwd=work, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (work / "clone" / "README").read_text().startswith("cloned over ssh")
    assert [json.loads(line)["via"] for line in log.read_text().splitlines()] == ["connect"]
    # an unlisted host: the helper prints the proxy's refusal and git fails
    proc = subprocess.run([SANDBOY, "run", "--policy", str(policy), "--", "git", "clone", "-q",
                           f"ssh://{user}@other.test:{port}{sshd['repo']}", "clone2"],
                          capture_output=True, text=True, env=env, cwd=work, timeout=120)
    assert proc.returncode != 0 and not (work / "clone2").exists()
    assert "other.test" in proc.stderr and "matches no net.domains entry" in proc.stderr, proc.stderr
