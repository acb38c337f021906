#!/usr/bin/env bash
# Installs everything nodeforge and its tests need on a fresh Debian 12 machine (root): apt packages,
# the virtualenv (.venv) and the systemd base images of the node OSes the tests run (Debian 12 and 13, Rocky 9 and
# Ubuntu 24.04 identities: docs/testing.md, "Node OSes"). Each step is skipped when already current.
set -euo pipefail
cd "$(dirname "$0")/.."

# rpm (rpmbuild, rpmsign), createrepo-c and python3-yaml: the EL tier's fixture RPM repositories and images
# (molecule/fixture_repo/fixture_rpm.py, lab/base-image/el.sh). skopeo and docker-registry: nodeforge mirror's
# container images, and the registries its tests copy them from and push them to (tests/test_mirror.py).
APT_PACKAGES=(podman runc debootstrap uidmap slirp4netns fuse-overlayfs conmon containernetworking-plugins
  dpkg-dev apt-utils gnupg openssh-client python3-venv make apt-cacher-ng qemu-system-x86 qemu-utils
  rpm createrepo-c python3-yaml openssl skopeo docker-registry)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO=sudo
if ((${#missing[@]})); then
  echo "setup: apt-get install ${missing[*]}"
  # apt-cacher-ng's postinst starts a system-wide instance listening on every interface; the tests run their own
  # (tools/apt_cache.py: loopback and the podman gateway only, started and stopped by the harness). A policy-rc.d
  # that refuses every start keeps the package from starting one; an existing policy-rc.d is left as it is.
  policy=/usr/sbin/policy-rc.d
  own_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\n# nodeforge tools/setup.sh, during apt-get install only\nexit 101\n' | $SUDO tee $policy >/dev/null
    $SUDO chmod 0755 $policy
    own_policy=1
  fi
  status=0
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null || status=$?
  ((own_policy)) && $SUDO rm -f $policy
  ((status == 0)) || exit "$status"
fi
# The packages also enable their services for the next boot (policy-rc.d only stops the start): disable them, and stop
# one that runs already, so that port 3142 is free for the harness's apt-cacher-ng, and no registry listens on port
# 5000 (tests/test_mirror.py runs its own docker-registry on loopback ports). Checked every time: cheap, and a machine
# where a package came in some other way gets the same treatment.
for service in apt-cacher-ng docker-registry; do
  if [[ -d /run/systemd/system ]]; then
    if systemctl is-enabled --quiet "$service" 2>/dev/null || systemctl is-active --quiet "$service" 2>/dev/null; then
      echo "setup: systemctl disable --now $service (the tests run their own instance)"
      $SUDO systemctl disable --now "$service" >/dev/null 2>&1
    fi
  elif [[ -x /etc/init.d/$service ]] && compgen -G "/etc/rc[2-5].d/S*$service" >/dev/null; then
    echo "setup: update-rc.d $service disable (the tests run their own instance)"
    $SUDO update-rc.d "$service" disable >/dev/null 2>&1 || true
    $SUDO "/etc/init.d/$service" stop >/dev/null 2>&1 || true
  fi
done

# The base image (podman, debootstrap: Debian's mirrors) builds while pip installs the virtualenv (PyPI): on a fresh
# machine 74 s and 71 s one after the other, 76 s side by side. Its output follows pip's; its failure fails
# setup.
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/containers/containers.conf}
# Two of the mixed lab's node OSes (tests/test_lab.py) build beside them: debootstrap waits on Debian's mirrors more
# than on the CPU. `lab up` and molecule/run.sh build any other one (the mixed lab's other five) when a run first needs
# it; each is rebuilt only when its script's checksum changes.
mkdir -p build
NODE_OSES=(debian12 rocky9 ubuntu24.04)
declare -A builds
for node_os in "${NODE_OSES[@]}"; do
  NODEFORGE_NODE_OS=$node_os bash lab/base-image/build.sh >"build/base-image-$node_os.log" 2>&1 &
  builds[$node_os]=$!
done
# A failed pip install still waits for the builds: nothing of them is left running half-way.
trap 'wait "${builds[@]}" 2>/dev/null || true' EXIT

stamp=.venv/.nodeforge-installed
want=$(sha256sum pyproject.toml | cut -c1-16)
if [[ ! -x .venv/bin/python || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  echo "setup: virtualenv .venv (pip install -e .[test])"
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip >/dev/null
  # Byte-compiled once by tools/compile_venv.sh, not by pip: nothing a run imports may go without its .pyc, and the
  # collections that ansible-core compiles from source need none.
  .venv/bin/pip install -q --no-compile -e '.[test]'
  bash tools/compile_venv.sh .venv
  echo "$want" >"$stamp"
fi

# promtool, Prometheus's own rule checker and PromQL engine, for the monitoring tests (tests/test_k8s_monitoring.py):
# taken out of Debian's prometheus package without installing it (the package would run a Prometheus server here).
if [[ ! -x build/promtool/promtool ]]; then
  echo "setup: promtool (apt-get download prometheus, unpacked into build/promtool)"
  rm -rf build/promtool.tmp && mkdir -p build/promtool.tmp
  (cd build/promtool.tmp && { apt-get download prometheus >/dev/null 2>&1 ||
    { $SUDO apt-get update -qq && apt-get download prometheus >/dev/null; }; }) &&
    dpkg-deb --fsys-tarfile build/promtool.tmp/prometheus_*.deb | tar -x -C build/promtool.tmp ./usr/bin/promtool &&
    mkdir -p build/promtool && mv build/promtool.tmp/usr/bin/promtool build/promtool/promtool
  rm -rf build/promtool.tmp
  [[ -x build/promtool/promtool ]] || { echo "setup: could not get promtool from Debian's prometheus package" >&2; exit 1; }
fi

failed=0
for node_os in "${NODE_OSES[@]}"; do
  status=0
  wait "${builds[$node_os]}" || status=$?
  cat "build/base-image-$node_os.log"
  if ((status != 0)); then
    echo "setup: NODEFORGE_NODE_OS=$node_os lab/base-image/build.sh failed (exit $status, output above)" >&2
    failed=$status
  fi
done
trap - EXIT
((failed == 0)) || exit "$failed"
