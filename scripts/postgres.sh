#!/usr/bin/env bash
# A private PostgreSQL server for development and tests (the controller's PostgreSQL store), run
# from Debian's server binaries with its state in one directory.
#
#   scripts/postgres.sh install              apt-get install postgresql when no initdb/postgres is
#                                            found under /usr/lib/postgresql/*/bin (needs root)
#   scripts/postgres.sh start [DIR]          reuse the server started earlier in DIR (default
#                                            /tmp/skipper-postgres) when it answers, else initdb
#                                            DIR/data (first time) and start it on a free port from
#                                            54320 up. Prints SKIPPER_STORE_URL=... on stdout.
#   scripts/postgres.sh stop [DIR]           stop the server started in DIR (pg_ctl stop -m fast)
#   scripts/postgres.sh url [DIR]            print SKIPPER_STORE_URL=... of the running server, or fail
#   scripts/postgres.sh createdb NAME [DIR]  drop database NAME ([a-z0-9_]+) if it exists, create it
#                                            empty, and print SKIPPER_STORE_URL=... naming it
#
# The URL is postgres://skipper@127.0.0.1:PORT/skipper: role `skipper` (not a superuser; it may
# create databases) owns database `skipper`. Only that role is let in over TCP, from 127.0.0.1 and
# without a password; the superuser `postgres` only through the unix socket in DIR/run (mode
# 0700: the server's owner and root). Every message but the URL goes to stderr.
#
# PostgreSQL refuses to run as root: run as root, the server runs as the `postgres` user that
# Debian's package creates, and DIR belongs to it. Durability settings (fsync, synchronous_commit,
# full_page_writes) keep their defaults: the store's durability is what its tests are about.
# A lock on DIR/lock makes calls in one DIR take turns, so a second `start` reuses the first's server.
set -euo pipefail

cmd="${1:-start}"
if [ "$cmd" = createdb ]; then
  name="${2:-}"
  dir="${3:-/tmp/skipper-postgres}"
else
  dir="${2:-/tmp/skipper-postgres}"
fi
dir="$(realpath -m -- "$dir")"
ROLE="skipper"
DATABASE="skipper"
FIRST_PORT=54320
LAST_PORT=54419
# psql's flags name the server; the caller's libpq settings must not send it elsewhere.
unset PGHOSTADDR PGSERVICE PGSSLMODE

log() { echo "postgres: $*" >&2; }

# The server binaries: the version DIR/data was made with when it exists, else the newest one.
pg_bin() {
  local bin=""
  if [ -r "$dir/data/PG_VERSION" ]; then
    bin="/usr/lib/postgresql/$(cat "$dir/data/PG_VERSION")/bin"
  else
    bin="$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n 1 || true)"
  fi
  if [ -z "$bin" ] || [ ! -x "$bin/initdb" ] || [ ! -x "$bin/postgres" ]; then
    # Not Debian's layout: whatever initdb is on PATH.
    bin="$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)")"
    [ -x "$bin/initdb" ] && [ -x "$bin/postgres" ] || return 1
  fi
  echo "$bin"
}

# The user the server runs as: `postgres` when we are root, else ourselves.
owner() {
  if [ "$(id -u)" = 0 ]; then echo postgres; else id -un; fi
}

# Runs a command as the server's owner, from / (root's home is not theirs to enter).
as_owner() {
  if [ "$(id -u)" = 0 ]; then
    (cd / && runuser -u postgres -- "$@")
  else
    (cd / && "$@")
  fi
}

install() {
  if bin="$(pg_bin)"; then
    log "postgresql is installed ($bin)"
    return 0
  fi
  log "installing postgresql"
  if [ "$(id -u)" != 0 ]; then
    log "not root: cannot apt-get install postgresql"
    return 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql >/dev/null
}

url_of() { echo "SKIPPER_STORE_URL=postgres://$ROLE@127.0.0.1:$1/$2"; }

# True when the server on DIR's recorded port answers as $ROLE in $DATABASE and is the one whose
# data is DIR/data (not another server that took the port since).
ours_answers() {
  local bin="$1" port
  port="$(cat "$dir/port" 2>/dev/null)" || return 1
  local seen
  seen="$(PGCONNECT_TIMEOUT=5 "$bin/psql" -qAtX -h 127.0.0.1 -p "$port" -U "$ROLE" -d "$DATABASE" \
    -c 'SHOW data_directory' 2>/dev/null)" || return 1
  [ "$seen" = "$dir/data" ]
}

# Takes the lock of DIR for the rest of the script. The server must not inherit its descriptor
# (it would hold the lock as long as it runs), so commands that start it close fd 9.
lock_dir() {
  exec 9>>"$dir/lock"
  flock -w 120 9 || { log "$dir/lock is held by another call for more than 120 s"; return 1; }
}

# DIR must be the owner's: when root made it just now (or it is empty) it is handed over; one that
# belongs to someone else (say a directory another user left in /tmp) is refused before anything
# in it is opened.
own_dir() {
  local who
  who="$(owner)"
  mkdir -p "$dir"
  if [ "$(stat -c %U "$dir")" != "$who" ]; then
    if [ "$(id -u)" = 0 ] && [ -z "$(find "$dir" -mindepth 1 -print -quit)" ]; then
      chown "$who": "$dir"
    else
      log "$dir belongs to $(stat -c %U "$dir"), not $who: remove it or pick another DIR"
      return 1
    fi
  fi
  chmod 755 "$dir"
  if ! as_owner test -w "$dir"; then
    log "$who cannot write to $dir (a parent directory shuts it out?)"
    return 1
  fi
}

init_cluster() {
  local bin="$1"
  log "initdb into $dir/data"
  as_owner "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C >/dev/null
  as_owner mkdir -m 700 -p "$dir/run"
  as_owner tee "$dir/data/pg_hba.conf" >/dev/null <<'EOF'
# scripts/postgres.sh: the superuser only through the unix socket (its directory is 0700); the
# test role over TCP from this host, without a password.
local   all   all                      trust
host    all   skipper   127.0.0.1/32   trust
EOF
  as_owner tee -a "$dir/data/postgresql.conf" >/dev/null <<EOF

# scripts/postgres.sh: a private server for development and tests (the port is given at start).
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir/run'
unix_socket_permissions = 0700
max_connections = 200
# Test queries are small: parallel workers only add start-up time and shared memory (a small
# /dev/shm in containers fails them).
max_parallel_workers_per_gather = 0
timezone = 'UTC'
log_timezone = 'UTC'
log_lock_waits = on
EOF
}

port_free() {
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Starts the server on the recorded port when it is free, else on the first free one; a port
# taken between the look and the bind (another DIR starting too) moves on to the next.
start_server() {
  local bin="$1" port
  port="$(cat "$dir/port" 2>/dev/null || echo "$FIRST_PORT")"
  [ "$port" -ge "$FIRST_PORT" ] && [ "$port" -le "$LAST_PORT" ] || port="$FIRST_PORT"
  local tried=0
  while [ "$tried" -le $((LAST_PORT - FIRST_PORT)) ]; do
    if port_free "$port"; then
      local before
      before="$(stat -c %s "$dir/postgres.log" 2>/dev/null || echo 0)"
      log "starting the server in $dir on 127.0.0.1:$port"
      if as_owner "$bin/pg_ctl" start -s -w -t 60 -D "$dir/data" -l "$dir/postgres.log" -o "-p $port" >&2 9>&-; then
        as_owner tee "$dir/port" >/dev/null <<<"$port"
        return 0
      fi
      if ! tail -c +"$((before + 1))" "$dir/postgres.log" | grep -q "Address already in use"; then
        log "the server did not start; its log:"
        tail -20 "$dir/postgres.log" >&2 || true
        return 1
      fi
      log "127.0.0.1:$port was taken meanwhile; trying the next port"
    fi
    tried=$((tried + 1))
    port=$((port + 1))
    [ "$port" -le "$LAST_PORT" ] || port="$FIRST_PORT"
  done
  log "no free port in $FIRST_PORT-$LAST_PORT"
  return 1
}

# The role and database of the URL (again after a start that stopped half-way).
ensure_database() {
  local bin="$1" port
  port="$(cat "$dir/port")"
  as_owner "$bin/psql" -qAtX -v ON_ERROR_STOP=1 -h "$dir/run" -p "$port" -U postgres -d postgres >&2 <<EOF
SET client_min_messages = warning;
SELECT 'CREATE ROLE $ROLE LOGIN CREATEDB' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE')\gexec
-- So that a reuse can check, with SHOW data_directory, which server holds the port.
GRANT pg_read_all_settings TO $ROLE;
SELECT 'CREATE DATABASE $DATABASE OWNER $ROLE' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$DATABASE')\gexec
EOF
}

start() {
  local bin
  if ! bin="$(pg_bin)"; then
    log "no initdb/postgres under /usr/lib/postgresql/*/bin or on PATH (run: $0 install)"
    return 1
  fi
  if [ "$(id -u)" = 0 ] && ! id -u postgres >/dev/null 2>&1; then
    log "running as root, and there is no 'postgres' user to run the server as (run: $0 install)"
    return 1
  fi
  # The socket's path must fit in sun_path (107 bytes); the path is quoted in postgresql.conf.
  case "$dir" in *[[:space:]\'\"\\]*) log "DIR must not hold spaces or quotes: $dir"; return 1 ;; esac
  if [ "${#dir}" -gt 80 ]; then
    log "DIR must be a path of at most 80 characters: $dir"
    return 1
  fi
  own_dir
  lock_dir
  if ours_answers "$bin"; then
    # Said, so that whoever takes the URL knows it reached a server it did not start.
    log "reusing the server already running in $dir on 127.0.0.1:$(cat "$dir/port") (not started now; $0 stop $dir stops it)"
    url_of "$(cat "$dir/port")" "$DATABASE"
    return 0
  fi
  [ -f "$dir/data/PG_VERSION" ] || init_cluster "$bin"
  if as_owner "$bin/pg_ctl" status -D "$dir/data" >/dev/null 2>&1; then
    # Running, but not answering as $ROLE on DIR/port (a start that stopped before the role was
    # made, or a lost port file): postmaster.pid's fourth line is its port.
    as_owner tee "$dir/port" >/dev/null <<<"$(sed -n 4p "$dir/data/postmaster.pid")"
  else
    start_server "$bin"
  fi
  ensure_database "$bin"
  if ! ours_answers "$bin"; then
    log "the server in $dir does not answer as $ROLE on 127.0.0.1:$(cat "$dir/port")"
    return 1
  fi
  url_of "$(cat "$dir/port")" "$DATABASE"
}

stop() {
  local bin
  bin="$(pg_bin)" || return 0
  as_owner "$bin/pg_ctl" status -D "$dir/data" >/dev/null 2>&1 || return 0
  as_owner "$bin/pg_ctl" stop -s -m fast -w -D "$dir/data" >&2
}

url() {
  local bin
  bin="$(pg_bin)" || { log "postgresql is not installed"; return 1; }
  if ! ours_answers "$bin"; then
    log "no server of $dir answers (run: $0 start $dir)"
    return 1
  fi
  url_of "$(cat "$dir/port")" "$DATABASE"
}

createdb() {
  if ! [[ "$name" =~ ^[a-z0-9_]{1,63}$ ]] || [[ "$name" =~ ^(postgres|template0|template1)$ ]]; then
    log "database name must match [a-z0-9_]{1,63} and not be postgres, template0 or template1: '$name'"
    return 1
  fi
  local bin port
  url >/dev/null
  bin="$(pg_bin)"
  port="$(cat "$dir/port")"
  # As $ROLE over TCP, like the tests, so the database is theirs; from the maintenance database,
  # since a database cannot be dropped from inside. Separate -c: neither may run in a transaction.
  "$bin/psql" -qAtX -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U "$ROLE" -d postgres \
    -c "SET client_min_messages = warning" \
    -c "DROP DATABASE IF EXISTS \"$name\" WITH (FORCE)" -c "CREATE DATABASE \"$name\"" >&2
  url_of "$port" "$name"
}

case "$cmd" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  url) url ;;
  createdb) createdb ;;
  *) echo "usage: $0 install | start [DIR] | stop [DIR] | url [DIR] | createdb NAME [DIR]" >&2; exit 2 ;;
esac
