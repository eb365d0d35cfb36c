#!/bin/sh
# Run this demo gate with a throwaway HOME holding a planted, fake SSH key, so that the
# steal-key and exfil steps have something real to go after. Never touches the real ~/.ssh.
#   examples/gate-demo/plant-and-run.sh [sandboy gate options...]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-$here/../../.venv/bin/python}
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
mkdir -m 700 "$home/.ssh"
printf '%s\n' '-----BEGIN OPENSSH PRIVATE KEY-----' 'FAKE-KEY-planted-by-the-sandboy-gate-demo' \
    '-----END OPENSSH PRIVATE KEY-----' >"$home/.ssh/id_ed25519"
chmod 600 "$home/.ssh/id_ed25519"
# The repository is checked out under that home, as a developer's would be: that is where the
# hostile steps look for the key (a step's own HOME is a private, empty directory).
mkdir -p "$home/src"
cp -R "$here" "$home/src/gate-demo"
# -P: the directory this is started from is not put first on the import path (ADR 0024, session 7)
HOME=$home "$python" -P -m sandboy.gate.cli "$home/src/gate-demo" "$@"
