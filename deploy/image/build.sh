#!/usr/bin/env bash
# Build the execserver image with podman (rootful, daemonless) — `make image`.
#
#   deploy/image/build.sh [TAG]          (default TAG: localhost/execserver:dev)
#
# BASE_IMAGE (env) is handed to the Dockerfile. When it is unset and the
# Dockerfile's default base cannot be had (no container registry reachable, as
# on build hosts that only see Debian's mirror and PyPI), a minimal Debian
# bookworm base is made locally instead: debootstrap with python3 (3.11),
# python3-venv, bubblewrap, tini and ca-certificates, then `podman import`.
# It is kept as localhost/execserver-base:bookworm and reused.
set -euo pipefail
cd "$(dirname "$0")/../.."

TAG=${1:-localhost/execserver:dev}
LOCAL_BASE=localhost/execserver-base:bookworm
DEFAULT_BASE=docker.io/library/python:3.11-slim-bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PODMAN=${PODMAN:-podman}

need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing $2" >&2
    apt-get install -y -qq "$2" >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "$2" >/dev/null 2>&1; }
  fi
  command -v "$1" >/dev/null 2>&1 || { echo "error: $1 is missing (apt-get install $2)" >&2; exit 1; }
}

build_local_base() {
  need debootstrap debootstrap
  local root
  root=$(mktemp -d /var/tmp/execserver-base.XXXXXX)
  trap 'rm -rf "$root"' RETURN
  echo "building $LOCAL_BASE with debootstrap (bookworm, minbase)" >&2
  debootstrap --variant=minbase \
    --include=python3,python3-venv,bubblewrap,tini,ca-certificates \
    bookworm "$root/rootfs" "$MIRROR" >"$root/debootstrap.log" 2>&1 \
    || { tail -20 "$root/debootstrap.log" >&2; exit 1; }
  # Smaller and reproducible enough: no apt lists, caches or logs in the base.
  rm -rf "$root/rootfs/var/lib/apt/lists/"* "$root/rootfs/var/cache/apt/"*.bin \
         "$root/rootfs/var/cache/apt/archives/"*.deb "$root/rootfs/var/log/"*
  tar -C "$root/rootfs" -c . | "$PODMAN" import \
    --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' - "$LOCAL_BASE" >/dev/null
}

need "$PODMAN" podman
base=${BASE_IMAGE:-}
if [ -z "$base" ]; then
  if "$PODMAN" image exists "$DEFAULT_BASE" || "$PODMAN" pull -q "$DEFAULT_BASE" >/dev/null 2>&1; then
    base=$DEFAULT_BASE
  else
    "$PODMAN" image exists "$LOCAL_BASE" || build_local_base
    base=$LOCAL_BASE
  fi
fi
echo "building $TAG from $base" >&2
# Host network: the build stage installs the wheels from PyPI. Docker format: the
# OCI image format has no HEALTHCHECK or SHELL.
# The host's CA bundle goes to pip too: some networks inspect TLS with their own CA.
ca=()
host_ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
if [ -f "$host_ca" ]; then
  ca=(-v "$host_ca:/run/host-ca.crt:ro" --build-arg PIP_CERT=/run/host-ca.crt)
fi
EXECSERVER_PROBE_IMAGE=$base "$(dirname "$0")/podman.sh" build --format docker --network host \
  "${ca[@]}" --build-arg "BASE_IMAGE=$base" -t "$TAG" -f Dockerfile . >&2
echo "$TAG"
