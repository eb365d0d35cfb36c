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
HOME=$home "$python" -m sandboy.gate.cli "$here" "$@"
