#!/usr/bin/env bash
# Installs everything nodeforge and its tests need on a fresh Debian 12 machine (root): apt packages,
# the virtualenv (.venv) and the Debian 12 systemd base image. Each step is skipped when already current.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(podman runc debootstrap uidmap slirp4netns fuse-overlayfs conmon containernetworking-plugins
  dpkg-dev apt-utils gnupg openssh-client python3-venv make)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: apt-get install ${missing[*]}"
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

stamp=.venv/.nodeforge-installed
want=$(sha256sum pyproject.toml | cut -c1-16)
if [[ ! -x .venv/bin/python || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  echo "setup: virtualenv .venv (pip install -e .[test])"
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q -e '.[test]'
  echo "$want" >"$stamp"
fi

export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/containers/containers.conf}
bash lab/base-image/build.sh
