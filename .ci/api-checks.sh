#!/usr/bin/env bash
# The gateway checked from another language, against a live example server on a loopback
# port: schemathesis generates requests from its OpenAPI document (no undocumented status, no
# 500), then a Python client generated from that document by openapi-python-client calls,
# reads, lists and deletes objects (tests/python). Installs what it needs into a virtualenv
# under target/ (see python-tools.sh); needs python3 and cargo.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET="${CARGO_TARGET_DIR:-target}"
WORK="$TARGET/api-checks"
VENV="$WORK/venv"
mkdir -p "$WORK"

bash .ci/python-tools.sh

# .ci/run has built them already (and its doctests hold cargo's build directory meanwhile).
if [ -z "${DURABLE_CI_BUILT:-}" ]; then
  cargo build --quiet --workspace --bins --examples
fi
SERVER="$TARGET/debug/examples/server"

# A fresh database, a random token (only its hash is written down) and a free loopback port.
TOKEN="$("$VENV/bin/python" -c 'import secrets; print(secrets.token_hex(16))')"
HASH="$(printf '%s' "$TOKEN" | sha256sum | cut -d' ' -f1)"
PORT="$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
BASE="http://127.0.0.1:$PORT"
rm -f "$WORK"/server.db*
cat > "$WORK/gateway.toml" <<TOML
bind = "127.0.0.1:$PORT"
call_timeout = "10s"

[[principals]]
name = "api-checks"
tokens_sha256 = ["$HASH"]
  [[principals.grants]]
  types = ["*"]
  handlers = ["*"]
  ops = ["call", "read", "list", "delete", "alarms", "admin", "kv_read", "kv_write"]
TOML

"$SERVER" serve --config "$WORK/gateway.toml" --database-url "sqlite://$WORK/server.db" \
  >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
stop_server() {
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" || true
  fi
}
trap stop_server EXIT

# Ready within 60 s, or the check fails with the server's log.
"$VENV/bin/python" - "$BASE" "$SERVER_PID" <<'PY' || { cat "$WORK/server.log"; exit 1; }
import os, sys, time, urllib.request
base, pid = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 60
while True:
    try:
        with urllib.request.urlopen(base + "/readyz", timeout=2) as reply:
            if reply.status == 200:
                break
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("the server exited before it was ready")
    if time.monotonic() > deadline:
        sys.exit("the server was not ready within 60 s")
    time.sleep(0.2)
PY

"$VENV/bin/python" - "$BASE" "$TOKEN" "$WORK/openapi.json" <<'PY'
import sys, urllib.request
base, token, path = sys.argv[1:]
request = urllib.request.Request(base + "/openapi.json", headers={"Authorization": f"Bearer {token}"})
with urllib.request.urlopen(request, timeout=10) as reply, open(path, "wb") as out:
    out.write(reply.read())
PY

echo "== api checks: schemathesis"
# From inside target/, where schemathesis keeps its cache.
(cd "$WORK" && venv/bin/schemathesis run openapi.json --url "$BASE" \
  --header "Authorization: Bearer $TOKEN" \
  --checks not_a_server_error,status_code_conformance \
  --phases examples,fuzzing --max-examples 50 --seed 20 \
  --workers 2 --request-timeout 15 --generation-database none \
  --report junit --report-junit-path schemathesis.xml --no-color)

echo "== api checks: generated Python client"
rm -rf "$WORK/client"
mkdir -p "$WORK/client"
printf 'post_hooks: []\n' > "$WORK/generator.yaml"
"$VENV/bin/openapi-python-client" generate --path "$WORK/openapi.json" --meta none \
  --config "$WORK/generator.yaml" --output-path "$WORK/client/durable_gateway_client"
DURABLE_GATEWAY="$BASE" DURABLE_TOKEN="$TOKEN" PYTHONPATH="$WORK/client" \
  "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/python
