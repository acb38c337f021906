#!/usr/bin/env bash
# Runs one molecule scenario with the shared config, from the repository root.
#   molecule/run.sh SCENARIO [COMMAND [ARGS...]]     COMMAND defaults to `test`
#   e.g. molecule/run.sh preflight; molecule/run.sh preflight converge; molecule/run.sh preflight login
# NODEFORGE_NODE_OS picks the node OS (debian12, the default, debian13, rocky8/rocky9/rhel8/rhel9 of the EL tier or
# ubuntu22.04/ubuntu24.04: lab/base-image/build.sh builds its base image); the verifier sees the same variable. MOLECULE_DISTRO picks another (already present) image. Without it, the
# scenario runs on its family's image (molecule/images.yml: the base image with its prepare.yml's preconditions baked,
# lab/images/build.sh) or on the base image; both are built or validated first. NODEFORGE_FAMILY_IMAGES=0 runs every
# scenario on the base image.
# One scenario runs once at a time on a machine, whatever its OS (its container and instance are named after the
# scenario): a second run of it waits for the first.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
export NODEFORGE_NODE_OS=${NODEFORGE_NODE_OS:-debian12}
case $NODEFORGE_NODE_OS in
  debian12 | debian13 | rocky8 | rocky9 | rhel8 | rhel9 | ubuntu22.04 | ubuntu24.04) ;;
  *)
    echo "error: NODEFORGE_NODE_OS=$NODEFORGE_NODE_OS: the scenarios run on debian12, debian13, rocky8, rocky9," \
      "rhel8, rhel9, ubuntu22.04 or ubuntu24.04" >&2
    exit 2
    ;;
esac
default_image=localhost/nodeforge-$NODEFORGE_NODE_OS:latest
base_config=$repo/molecule/shared/base.yml

usage() { echo "usage: $0 SCENARIO [COMMAND [ARGS...]]" >&2; exit 2; }
[[ $# -ge 1 && $1 != -* ]] || usage
scenario=$1; shift
command=${1:-test}; [[ $# -gt 0 ]] && shift

if [[ ! -f $repo/molecule/$scenario/molecule.yml ]]; then
  echo "error: no scenario $scenario (molecule/$scenario/molecule.yml is missing)" >&2
  exit 2
fi
# molecule silently ignores a --base-config path that does not exist; refuse instead.
[[ -f $base_config ]] || { echo "error: $base_config is missing" >&2; exit 2; }

# podman needs runc and lower ulimits on these hosts (see containers/containers.conf); /etc is never edited.
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo/containers/containers.conf}
# NODEFORGE_VENV: another virtualenv's molecule and Ansible (tools/matrix.sh's floor leg).
venv=${NODEFORGE_VENV:-$repo/.venv}
if [[ -x $venv/bin/molecule ]]; then
  # molecule runs ansible-playbook, ansible-config and pytest by name.
  export PATH=$venv/bin:$PATH
fi
command -v molecule >/dev/null || { echo "error: molecule is not installed (see pyproject.toml [dev])" >&2; exit 1; }

chosen=${MOLECULE_DISTRO:-}
image=${chosen:-$default_image}
if [[ $image == "$default_image" ]]; then
  NODEFORGE_BASE_IMAGE=$default_image bash "$repo/lab/base-image/build.sh"
fi
if [[ -z $chosen && ${NODEFORGE_FAMILY_IMAGES:-1} != 0 ]]; then
  python=$(command -v python3)
  [[ -x $venv/bin/python ]] && python=$venv/bin/python
  family=$("$python" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["families"].get(sys.argv[2], ""))' \
    "$repo/molecule/images.yml" "$scenario")
  if [[ -n $family ]]; then
    image=$(NODEFORGE_BASE_IMAGE=$default_image bash "$repo/lab/images/build.sh" "$family" | tail -1)
  fi
fi
# molecule/shared/base.yml's platform names the Debian 12 image when MOLECULE_DISTRO is unset.
export MOLECULE_DISTRO=$image
if ! podman image exists "$image"; then
  echo "error: image $image is not present (it is never pulled: build it locally)" >&2
  exit 1
fi

# Each OS keeps its own molecule state (the instance config, the fixture repository built for it).
if [[ $NODEFORGE_NODE_OS != debian12 ]]; then
  export MOLECULE_EPHEMERAL_DIRECTORY=${XDG_CACHE_HOME:-$HOME/.cache}/molecule/nodeforge-$NODEFORGE_NODE_OS/$scenario
fi
mkdir -p /var/tmp/nodeforge-molecule
exec 8>"/var/tmp/nodeforge-molecule/$scenario.lock"
flock 8

# How the node is reached (molecule/shared/base.yml, create.yml, verify_lib.node_host): over SSH, as the lab's nodes
# and real ones are, on the loopback port podman publishes for the container's sshd, with the harness's own client and
# host keys (host key checking on). A `podman exec` costs the machine about 0.24 CPU-s, a command over SSH's master
# connection about 0.02 (docs/testing.md, "The molecule connection"). An image chosen with MOLECULE_DISTRO (the GitHub
# workflow's public images have no sshd) is reached through `podman exec` (nodeforge_podman) instead.
export NODEFORGE_MOLECULE_SSH=${XDG_CACHE_HOME:-$HOME/.cache}/nodeforge-molecule/$scenario
if [[ -z $chosen ]]; then
  export NODEFORGE_MOLECULE_CONNECTION=ssh
  command -v ssh >/dev/null && command -v ssh-keygen >/dev/null ||
    { echo "error: the scenarios reach their node over SSH: install openssh-client" >&2; exit 1; }
  # Kept between runs (the scenario's lock above is held): a node created by an earlier `run.sh SCENARIO create`
  # still holds these keys.
  mkdir -p -m 0700 "$NODEFORGE_MOLECULE_SSH"
  for key in id_ed25519 ssh_host_ed25519_key; do
    [[ -f $NODEFORGE_MOLECULE_SSH/$key && -f $NODEFORGE_MOLECULE_SSH/$key.pub ]] && continue
    rm -f "$NODEFORGE_MOLECULE_SSH/$key" "$NODEFORGE_MOLECULE_SSH/$key.pub"
    ssh-keygen -q -t ed25519 -N '' -C "nodeforge molecule $scenario $key" -f "$NODEFORGE_MOLECULE_SSH/$key"
  done
else
  export NODEFORGE_MOLECULE_CONNECTION=nodeforge_podman
fi

cd "$repo"
exec molecule --base-config "$base_config" "$command" --scenario-name "$scenario" "$@"
