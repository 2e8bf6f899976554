#!/usr/bin/env bash
# Run a command with a throwaway PostgreSQL server on 127.0.0.1 and DATABASE_URL set.
# Installs Debian's postgresql first when it is missing (needs root, as in CI).
set -euo pipefail

if ! ls -d /usr/lib/postgresql/*/bin >/dev/null 2>&1; then
  echo "with_postgres: installing postgresql" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
PORT=${CONVERGE_PG_PORT:-55432}
PGDATA=$(mktemp -d /tmp/converge-pgdata.XXXXXX)
run_as_postgres() {
  if [ "$(id -u)" = "0" ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
if [ "$(id -u)" = "0" ]; then chown postgres:postgres "$PGDATA"; fi
stop() {
  run_as_postgres "$PGBIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$PGDATA"
}
trap stop EXIT
run_as_postgres "$PGBIN/initdb" -D "$PGDATA" -U postgres --auth=trust -E UTF8 --no-sync >/dev/null
run_as_postgres "$PGBIN/pg_ctl" -D "$PGDATA" -l "$PGDATA/server.log" -w -t 30 \
  -o "-c listen_addresses=127.0.0.1 -p $PORT -k $PGDATA -c fsync=off" start >/dev/null
export DATABASE_URL="postgresql://postgres@127.0.0.1:$PORT/postgres"
echo "with_postgres: PostgreSQL ready at $DATABASE_URL" >&2
"$@"
