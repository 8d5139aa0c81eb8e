#!/usr/bin/env bash
# The API checks' Python tools (schemathesis, openapi-python-client, pytest), from PyPI into a
# virtualenv under target/api-checks/venv. Idempotent: a second run only confirms them.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${CARGO_TARGET_DIR:-target}/api-checks/venv"
mkdir -p "$(dirname "$VENV")"

if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
  echo "python3 venv: not installed; installing it"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
fi
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet --disable-pip-version-check \
  'schemathesis>=4.32,<5' 'openapi-python-client>=0.29,<0.30' 'pytest>=8,<10'
