#!/usr/bin/env bash
# A throwaway PostgreSQL server for the closed-loop experiment's three-tier baseline
# (tools/Isis.ClosedLoop; docs/performance.md, "Closed loop against PostgreSQL").
#
#   postgres.sh start [--parent-pid PID] [--max-connections N]
#       Installs PostgreSQL with apt-get if it is missing (root only), creates a cluster in a new
#       directory under /var/tmp (a disk, not tmpfs: the commits' fsyncs must be real), starts it on
#       a free 127.0.0.1 port with fsync=on and synchronous_commit=on, and prints on stdout:
#         PGDIR=<directory to pass to stop>
#         PGDATA=<the cluster's data directory>
#         PGPORT=<port>
#         PGVERSION=<major version>
#         CONNECTION=<Npgsql connection string>
#       With --parent-pid, a watchdog stops and deletes the cluster once that process is gone, so a
#       parent killed before it could call stop leaves nothing running.
#       When PostgreSQL cannot be provided (not root and not installed), prints "SKIP: <reason>" and
#       exits with 3; any other failure exits with 1 and says why on stderr.
#   postgres.sh stop PGDIR
#       Stops the cluster (fast shutdown) and deletes the directory. Safe to call twice.
#
# Authentication is "trust" on 127.0.0.1 only: the cluster lives for one run, holds one table of
# generated numbers and is deleted at the end.
set -euo pipefail

find_bindir() {
  local newest=""
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && newest="$d"
  done
  # Versions sort as directory names do for 2-digit majors (13..99), which is every packaged one.
  [ -n "$newest" ] && echo "$newest"
}

# Runs a command as the cluster's owner: the postgres user when we are root (initdb and the server
# refuse to run as root), else ourselves.
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

stop_cluster() {
  local dir="$1"
  [ -n "$dir" ] && [ -d "$dir" ] || return 0
  # Only what start made: never delete anything else, whatever the argument.
  case "$(readlink -f "$dir")" in
    /var/tmp/isis-closedloop-pg.*) ;;
    *) echo "postgres.sh: $dir is not a cluster directory made by postgres.sh start" >&2; return 2 ;;
  esac
  local bindir
  bindir="$(cat "$dir/bindir" 2>/dev/null || find_bindir || true)"
  if [ -n "$bindir" ] && [ -f "$dir/data/postmaster.pid" ]; then
    as_owner "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
}

start_cluster() {
  local parent="" max_connections=200
  while [ $# -gt 0 ]; do
    case "$1" in
      --parent-pid) parent="$2"; shift 2 ;;
      --max-connections) max_connections="$2"; shift 2 ;;
      *) echo "postgres.sh: unknown option $1" >&2; exit 2 ;;
    esac
  done

  local bindir
  bindir="$(find_bindir || true)"
  if [ -z "$bindir" ]; then
    if [ "$(id -u)" != 0 ]; then
      echo "SKIP: PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb) and installing it needs root"
      exit 3
    fi
    if ! command -v apt-get >/dev/null; then
      echo "SKIP: PostgreSQL is not installed and there is no apt-get to install it"
      exit 3
    fi
    echo "postgres.sh: installing postgresql with apt-get" >&2
    # The package's own default cluster is not used: ours is created below.
    if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; } >&2; then
      echo "SKIP: apt-get could not install postgresql"
      exit 3
    fi
    bindir="$(find_bindir || true)"
    [ -n "$bindir" ] || { echo "SKIP: postgresql installed but no initdb found under /usr/lib/postgresql"; exit 3; }
  fi

  local dir
  dir="$(mktemp -d /var/tmp/isis-closedloop-pg.XXXXXX)"
  echo "$bindir" > "$dir/bindir"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin postgres
    chown postgres "$dir"
  fi
  chmod 700 "$dir"
  trap 'stop_cluster "$dir"' ERR

  as_owner "$bindir/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; echo "postgres.sh: initdb failed" >&2; exit 1; }

  # A free port: a random one nobody answers on; pg_ctl fails if it was taken meanwhile, then another.
  local port="" attempt
  for attempt in 1 2 3 4 5 6 7 8; do
    local candidate=$(( 20000 + RANDOM % 20000 ))
    port_in_use "$candidate" && continue
    if as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start -o \
        "-c listen_addresses=127.0.0.1 -c port=$candidate -c unix_socket_directories='$dir' -c fsync=on -c synchronous_commit=on -c max_connections=$max_connections" \
        >/dev/null 2>&1; then
      port="$candidate"
      break
    fi
  done
  if [ -z "$port" ]; then
    tail -n 20 "$dir/server.log" >&2 || true
    echo "postgres.sh: the server did not start on any of 8 ports" >&2
    stop_cluster "$dir"
    exit 1
  fi
  trap - ERR

  if [ -n "$parent" ]; then
    local self
    self="$(readlink -f "$0")"
    # Detached, with no inherited output (the caller reads our stdout to its end).
    setsid bash -c "while kill -0 $parent 2>/dev/null; do sleep 1; done; '$self' stop '$dir'" </dev/null >/dev/null 2>&1 &
  fi

  echo "PGDIR=$dir"
  echo "PGDATA=$dir/data"
  echo "PGPORT=$port"
  echo "PGVERSION=$(basename "$(dirname "$bindir")")"
  echo "CONNECTION=Host=127.0.0.1;Port=$port;Username=postgres;Database=postgres"
}

case "${1:-}" in
  start) shift; start_cluster "$@" ;;
  stop) [ $# -eq 2 ] || { echo "usage: postgres.sh stop PGDIR" >&2; exit 2; }; stop_cluster "$2" ;;
  *) echo "usage: postgres.sh start [--parent-pid PID] [--max-connections N] | postgres.sh stop PGDIR" >&2; exit 2 ;;
esac
