#!/usr/bin/env bash
# Builds a scenario family's image: the node OS's base image (lab/base-image/build.sh; NODEFORGE_NODE_OS, debian12 by
# default) with the preconditions that the
# family's prepare.yml installs already installed, so that each scenario run finds them present instead of installing
# them again. molecule/images.yml maps scenarios to families; molecule/run.sh calls this.
#   lab/images/build.sh FAMILY        builds localhost/nodeforge-<os>-FAMILY:latest if needed; prints its name last
# The recipe is lab/images/FAMILY.sh, run as root in a container of the base image on podman's network (so Debian's
# packages come through the harness's package cache when it runs, tools/apt_cache.py). Cached like the base image:
# the image carries the sha256 of the base image's build sha, this script and the recipe, and is rebuilt only when one
# of them changes (or with NODEFORGE_REBUILD_IMAGE=1). Never what a role installs: only what prepare.yml would.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
node_os=${NODEFORGE_NODE_OS:-debian12}
[[ $node_os =~ ^[a-z0-9.]+$ ]] || { echo "error: NODEFORGE_NODE_OS=$node_os is not an OS id such as debian13" >&2; exit 2; }
base=${NODEFORGE_BASE_IMAGE:-localhost/nodeforge-$node_os:latest}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo/containers/containers.conf}

[[ $# -eq 1 && $1 =~ ^[a-z0-9_]+$ ]] || { echo "usage: $0 FAMILY (a recipe lab/images/FAMILY.sh)" >&2; exit 2; }
family=$1
recipe=$here/$family.sh
[[ -f $recipe ]] || { echo "error: no recipe $recipe" >&2; exit 2; }
image=localhost/nodeforge-${node_os//./}-${family//_/-}:latest

label() { podman image inspect --format "{{ index .Config.Labels \"org.nodeforge.build-sha\" }}" "$1" 2>/dev/null || true; }
base_sum=$(label "$base")
[[ -n $base_sum ]] || { echo "error: base image $base is not built (lab/base-image/build.sh)" >&2; exit 1; }
sum=$( (echo "$base_sum"; cat "$0" "$recipe") | sha256sum | cut -c1-16)

# Two scenarios of one family may start at once (pytest -n 2): one builds, the other waits and reuses.
mkdir -p /var/tmp/nodeforge-images
exec 9>"/var/tmp/nodeforge-images/$node_os-$family.lock"
flock 9

if [[ "$(label "$image")" == "$sum" && "${NODEFORGE_REBUILD_IMAGE:-0}" != 1 ]]; then
  echo "family image $image is current ($sum)" >&2
  echo "$image"
  exit 0
fi

container=nodeforge-image-build-$family-$$
trap 'podman rm -f "$container" >/dev/null 2>&1 || true' EXIT
echo "building $image from $base with lab/images/$family.sh" >&2
started=$SECONDS
# No init: the recipe only installs; a policy-rc.d keeps package scripts from starting services (each scenario's
# prepare.yml starts what it needs, with its own configuration). Removed again, with apt's downloads and lists: the
# lists must look stale, as in the base image (an hour-old image must not make cache_valid_time skip an update).
podman run --name "$container" --network podman -i "$base" bash -euo pipefail -s >"/var/tmp/nodeforge-images/$node_os-$family.log" 2>&1 <<SCRIPT || {
printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d
export DEBIAN_FRONTEND=noninteractive
$(cat "$recipe")
rm -f /usr/sbin/policy-rc.d
apt-get clean
rm -rf /var/lib/apt/lists/*
touch -d @0 /var/lib/apt/lists
SCRIPT
  tail -30 "/var/tmp/nodeforge-images/$node_os-$family.log" >&2
  echo "error: recipe lab/images/$family.sh failed (log: /var/tmp/nodeforge-images/$node_os-$family.log)" >&2
  exit 1
}
podman commit -q \
  --change 'CMD ["/sbin/init"]' \
  --change 'STOPSIGNAL SIGRTMIN+3' \
  --change "LABEL org.nodeforge.build-sha=$sum" \
  --change "LABEL org.nodeforge.family=$family" \
  "$container" "$image" >/dev/null
echo "built $image ($sum) in $((SECONDS - started)) s" >&2
echo "$image"
