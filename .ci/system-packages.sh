#!/usr/bin/env bash
# The Debian packages the checks use beyond the toolchain: strace (the crash test counts a
# killed child's fsync calls), Chromium (the console's browser tests) and Python's venv (the
# API checks' tools). Installs only what is missing; needs root.
set -euo pipefail

missing=()
command -v strace >/dev/null 2>&1 || missing+=(strace)
[ -x /usr/bin/chromium ] || missing+=(chromium)
python3 -c 'import ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)

if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
