#!/usr/bin/env bash
# A Docker engine for development and tests, on machines without one running, and a busybox
# image that needs no registry.
#
#   scripts/docker-engine.sh install      apt-get install docker.io docker-compose busybox-static,
#                                         and docker-registry apache2-utils (a private registry
#                                         with htpasswd logins, for the registry credential tests)
#                                         (only what is missing; needs root)
#   scripts/docker-engine.sh start [DIR]  use the engine at $DOCKER_HOST or /var/run/docker.sock
#                                         when one answers, else start a private dockerd with its
#                                         state in DIR (default /tmp/skipper-docker); then load
#                                         the test image. Prints DOCKER_HOST=... on stdout.
#   scripts/docker-engine.sh private DIR  the engine of DIR only: reuse it when it answers, else
#                                         start it (never another engine); as `start`, prints
#                                         DOCKER_HOST=... and says "starting dockerd" when it did
#   scripts/docker-engine.sh shared       the engine at $DOCKER_HOST or /var/run/docker.sock when
#                                         one answers (loads the test image); never starts one
#   scripts/docker-engine.sh stop [DIR]   stop the private dockerd started in DIR
#
# SKIPPER_DOCKER_ADDRESS_POOL (e.g. 10.201.0.0/16) gives a private dockerd its own address pool,
# so two engines on one host (the two-node tests) never hand out the same subnets.
#
# The test image is `skipper-busybox:local`: /bin/busybox (static) and its applet links, made
# with `docker import`. It is also tagged `busybox:stable` when no such image exists, so the
# example tenant runs offline.
set -euo pipefail

cmd="${1:-start}"
dir="${2:-/tmp/skipper-docker}"
IMAGE="skipper-busybox:local"

log() { echo "docker-engine: $*" >&2; }

engine_answers() {
  DOCKER_HOST="$1" timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

install() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 || missing+=(docker-compose)
  [ -x /bin/busybox ] && /bin/busybox --list >/dev/null 2>&1 || missing+=(busybox-static)
  command -v docker-registry >/dev/null || missing+=(docker-registry)
  command -v htpasswd >/dev/null || missing+=(apache2-utils)
  if [ ${#missing[@]} -eq 0 ]; then
    log "docker engine, compose, busybox and the registry are installed"
    return 0
  fi
  log "installing ${missing[*]}"
  if [ "$(id -u)" != 0 ]; then
    log "not root: cannot apt-get install ${missing[*]}"
    return 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
}

load_image() {
  local host="$1"
  if DOCKER_HOST="$host" docker image inspect "$IMAGE" >/dev/null 2>&1; then
    :
  else
    local busybox
    busybox="$(command -v busybox || true)"
    [ -x /bin/busybox ] && busybox=/bin/busybox
    if [ -z "$busybox" ]; then
      log "no busybox binary to build $IMAGE from (install busybox-static)"
      return 1
    fi
    local root
    root="$(mktemp -d)"
    mkdir -p "$root/bin" "$root/tmp" "$root/www"
    cp "$busybox" "$root/bin/busybox"
    for applet in $("$busybox" --list); do
      [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
    done
    tar -C "$root" -c . | DOCKER_HOST="$host" docker import \
      --change 'ENV PATH=/bin' --change 'CMD ["sh"]' - "$IMAGE" >/dev/null
    rm -rf "$root"
    log "loaded $IMAGE"
  fi
  if ! DOCKER_HOST="$host" docker image inspect busybox:stable >/dev/null 2>&1; then
    DOCKER_HOST="$host" docker tag "$IMAGE" busybox:stable
  fi
}

# Reuses the first of the candidates that answers; prints its DOCKER_HOST. Fails when none does.
reuse() {
  for host in "$@"; do
    if engine_answers "$host"; then
      load_image "$host"
      echo "DOCKER_HOST=$host"
      return 0
    fi
  done
  return 1
}

shared() {
  local candidates=()
  [ -n "${DOCKER_HOST:-}" ] && candidates+=("$DOCKER_HOST")
  candidates+=("unix:///var/run/docker.sock")
  reuse "${candidates[@]}" && return 0
  log "no engine answers at ${candidates[*]}"
  return 1
}

start() {
  local candidates=()
  [ -n "${DOCKER_HOST:-}" ] && candidates+=("$DOCKER_HOST")
  candidates+=("unix:///var/run/docker.sock" "unix://$dir/docker.sock")
  launch "${candidates[@]}"
}

# The candidates when one answers, else a dockerd started in $dir.
launch() {
  reuse "$@" && return 0
  if ! command -v dockerd >/dev/null; then
    log "no engine answers and dockerd is not installed (run: $0 install)"
    return 1
  fi
  if [ "$(id -u)" != 0 ]; then
    log "no engine answers and starting dockerd needs root"
    return 1
  fi
  local host="unix://$dir/docker.sock"
  # A dockerd of ours already runs in $dir but did not answer in time (a loaded machine): wait for
  # it rather than start a second one over it, which would take its socket and exec root and leave
  # both broken.
  if [ -f "$dir/dockerd.pid" ] && [ "$(cat "/proc/$(cat "$dir/dockerd.pid")/comm" 2>/dev/null)" = dockerd ]; then
    log "dockerd $(cat "$dir/dockerd.pid") runs in $dir but does not answer yet; waiting for it"
    for _ in $(seq 1 12); do
      if engine_answers "$host"; then
        load_image "$host"
        echo "DOCKER_HOST=$host"
        return 0
      fi
    done
    log "dockerd $(cat "$dir/dockerd.pid") in $dir does not answer; stop it ($0 stop $dir) and start again"
    return 1
  fi
  mkdir -p "$dir/root" "$dir/exec"
  log "starting dockerd in $dir"
  # vfs works on any file system (also inside containers); no iptables and no default bridge,
  # which sandboxes lack. User-defined networks and published ports on 127.0.0.1 still work.
  local pool=()
  [ -n "${SKIPPER_DOCKER_ADDRESS_POOL:-}" ] && pool=(--default-address-pool "base=${SKIPPER_DOCKER_ADDRESS_POOL},size=24")
  setsid dockerd --iptables=false --bridge=none --storage-driver=vfs "${pool[@]}" \
    --data-root "$dir/root" --exec-root "$dir/exec" --pidfile "$dir/dockerd.pid" \
    -H "$host" >"$dir/dockerd.log" 2>&1 < /dev/null &
  for _ in $(seq 1 60); do
    if engine_answers "$host"; then
      load_image "$host"
      echo "DOCKER_HOST=$host"
      return 0
    fi
    sleep 0.5
  done
  log "dockerd did not answer within 30 s; its log:"
  tail -20 "$dir/dockerd.log" >&2 || true
  return 1
}

stop() {
  if [ -f "$dir/dockerd.pid" ]; then
    kill "$(cat "$dir/dockerd.pid")" 2>/dev/null || true
    for _ in $(seq 1 40); do
      [ -f "$dir/dockerd.pid" ] || break
      kill -0 "$(cat "$dir/dockerd.pid")" 2>/dev/null || break
      sleep 0.25
    done
  fi
}

case "$cmd" in
  install) install ;;
  start) start ;;
  private) launch "unix://$dir/docker.sock" ;;
  shared) shared ;;
  stop) stop ;;
  *) echo "usage: $0 install | start [DIR] | private DIR | shared | stop [DIR]" >&2; exit 2 ;;
esac
