#!/usr/bin/env bash
# podman, with the options this host needs to run containers at all.
#
#   deploy/image/podman.sh build|run|... ARGS...
#
# Nothing here weakens a container's isolation; it only copes with hosts where
# podman's defaults cannot start one:
# * crun refuses hybrid cgroup hierarchies (v1 controllers + a v2 mount with
#   controllers): use runc there;
# * a host without CAP_SYS_RESOURCE cannot raise rlimits to podman's defaults:
#   ask for the limits the caller already has instead.
# The choice is probed once with a throw-away container and cached per boot.
set -euo pipefail
PODMAN=${PODMAN:-podman}
probe_image=${EXECSERVER_PROBE_IMAGE:-localhost/execserver-base:bookworm}
cache=/run/execserver-podman-args
if [ ! -f "$cache" ] || [ "$cache" -ot /proc/1 ]; then
  limits=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit "nproc=4096:4096")
  args=""
  if ! "$PODMAN" image exists "$probe_image"; then
    args=""  # nothing to probe with yet; try the defaults
  elif "$PODMAN" run --rm "$probe_image" true >/dev/null 2>&1; then
    args=""
  elif "$PODMAN" run --rm "${limits[@]}" "$probe_image" true >/dev/null 2>&1; then
    args="${limits[*]}"
  elif command -v runc >/dev/null 2>&1 \
      && "$PODMAN" --runtime runc run --rm "${limits[@]}" "$probe_image" true >/dev/null 2>&1; then
    args="--runtime runc ${limits[*]}"
  fi
  printf '%s\n' "$args" > "$cache" 2>/dev/null || true
fi
read -r -a extra < "$cache" || extra=()
global=() sub=()
for ((i = 0; i < ${#extra[@]}; i++)); do
  if [ "${extra[i]}" = --runtime ]; then global+=(--runtime "${extra[i+1]}"); i=$((i + 1))
  else sub+=("${extra[i]}"); fi
done
command=$1; shift
case "$command" in
  run|build|create) exec "$PODMAN" "${global[@]}" "$command" "${sub[@]}" "$@" ;;
  *) exec "$PODMAN" "${global[@]}" "$command" "$@" ;;
esac
