#!/usr/bin/env bash
# Makes sure a PostgreSQL server listens on 127.0.0.1:5432, trusts local connections and has a
# database `test`: starts the installed cluster if it is down, installs PostgreSQL if it is
# missing. Idempotent; needs root. Source it to get DATABASE_URL exported.
set -euo pipefail

export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"

pg_ready() { pg_isready -h 127.0.0.1 -p 5432 -q >/dev/null 2>&1; }
pg_query() { psql -h 127.0.0.1 -p 5432 -U postgres -d postgres -XtAq -c "$1" 2>/dev/null; }

if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  echo "postgres: not installed; installing it"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql >/dev/null
fi

version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$version" ]; then
  version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
  echo "postgres: creating cluster $version/main"
  pg_createcluster "$version" main >/dev/null
fi
conf="/etc/postgresql/$version/main"

if ! pg_ready; then
  echo "postgres: starting cluster $version/main"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  for _ in $(seq 1 30); do pg_ready && break; sleep 1; done
fi

if ! pg_query 'select 1' >/dev/null; then
  # Tests connect as `postgres` over loopback without a password: trust loopback only.
  echo "postgres: trusting loopback connections"
  {
    echo "host all all 127.0.0.1/32 trust"
    echo "host all all ::1/128 trust"
    cat "$conf/pg_hba.conf"
  } >"$conf/pg_hba.conf.new"
  mv "$conf/pg_hba.conf.new" "$conf/pg_hba.conf"
  echo "listen_addresses = '127.0.0.1'" >>"$conf/postgresql.conf"
  pg_ctlcluster --skip-systemctl-redirect "$version" main restart
  for _ in $(seq 1 30); do pg_ready && break; sleep 1; done
fi

if [ "$(pg_query "select 1 from pg_database where datname = 'test'")" != "1" ]; then
  echo "postgres: creating database test"
  pg_query 'create database test' >/dev/null
fi

pg_query 'select 1' >/dev/null || { echo "postgres: still not reachable on 127.0.0.1:5432" >&2; exit 1; }
echo "postgres: ready at $DATABASE_URL"
