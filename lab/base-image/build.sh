#!/usr/bin/env bash
# Builds a systemd base image for the molecule scenarios and the lab: Debian 12 (bookworm) by default, Debian 13
# (trixie) with NODEFORGE_NODE_OS=debian13; rocky8/rocky9/rhel8/rhel9 (the EL tier, el.sh) and ubuntu22.04/ubuntu24.04
# (ubuntu.sh) are Debian with another OS's identity (docs/testing.md, "Node OSes"). The image is
# localhost/nodeforge-<os>:latest unless NODEFORGE_BASE_IMAGE names another.
# Cached: the image carries the sha256 of this script (and of the suite it was built from) as a label and is rebuilt
# only when the script changes (or when NODEFORGE_REBUILD_IMAGE=1).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
node_os=${NODEFORGE_NODE_OS:-debian12}
case $node_os in
  debian12) suite=bookworm ;;
  debian13) suite=trixie ;;
  # The EL tier: Debian 12 (whose dnf 4.14 is EL 9's) with Rocky's or RHEL's identity and rpm database (el.sh).
  rocky8 | rocky9 | rhel8 | rhel9) suite=bookworm el=1 ;;
  # Ubuntu's identity over the Debian release closest to it (ubuntu.sh).
  ubuntu22.04) suite=bookworm ubuntu=1 ;;
  ubuntu24.04) suite=trixie ubuntu=1 ;;
  *)
    echo "error: NODEFORGE_NODE_OS=$node_os: a base image is built for debian12, debian13, rocky8, rocky9, rhel8," \
      "rhel9, ubuntu22.04 or ubuntu24.04" >&2
    exit 2
    ;;
esac
el=${el:-0}
ubuntu=${ubuntu:-0}
extra=""
((el)) && extra=",dnf,dnf-plugins-core,rpm,python3-dnf"
image=${NODEFORGE_BASE_IMAGE:-localhost/nodeforge-$node_os:latest}
mirror=${NODEFORGE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo/containers/containers.conf}

# fixture_rpm.py builds the EL userland (el.sh); an installed nodeforge ships lab/ without molecule/.
sum=$( (echo "$node_os"; cat "$0" "$here/apt-proxy-detect" "$here/el.sh" "$here/el-userland.yml" "$here/ubuntu.sh"
  cat "$repo/molecule/fixture_repo/fixture_rpm.py" 2>/dev/null || true) | sha256sum | cut -c1-16)
current=$(podman image inspect --format '{{ index .Config.Labels "org.nodeforge.build-sha" }}' "$image" 2>/dev/null || true)
if [[ "$current" == "$sum" && "${NODEFORGE_REBUILD_IMAGE:-0}" != 1 ]]; then
  echo "base image $image is current ($sum)"
  exit 0
fi

for tool in debootstrap podman; do
  command -v "$tool" >/dev/null || { echo "error: $tool is not installed (apt-get install $tool)" >&2; exit 1; }
done

root=$(mktemp -d /var/tmp/nodeforge-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "debootstrap $suite into $root (about a minute)"
# gpgv for the verifiers (molecule/shared/verify_lib.py checks apt's signed indexes with it): Debian 13's apt verifies
# with sqv and no longer brings it. No role uses it.
debootstrap --variant=minbase \
  --include=python3,python3-apt,systemd,systemd-sysv,dbus,sudo,ca-certificates,gnupg,gpgv,iproute2,pciutils,kmod,openssh-server$extra \
  "$suite" "$root" "$mirror" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
rm -f "$root.log"

# Non-free components are what the driver roles install from; deb-src is not needed.
cat >"$root/etc/apt/sources.list" <<SRC
deb $mirror $suite main contrib non-free non-free-firmware
deb $mirror $suite-updates main contrib non-free non-free-firmware
deb http://deb.debian.org/debian-security $suite-security main contrib non-free non-free-firmware
SRC
# Units that cannot work in a container and would keep systemd from reaching "running".
for unit in systemd-remount-fs.service getty.target console-getty.service systemd-udevd.service \
  systemd-udev-trigger.service systemd-modules-load.service sys-kernel-config.mount \
  sys-kernel-debug.mount sys-kernel-tracing.mount systemd-firstboot.service; do
  ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
# Debian's periodic jobs would change a test node on their own schedule: dpkg-db-backup rewrites /var/backups at
# midnight (a CI run that crossed midnight failed preflight's "the role wrote nothing" check on it), apt-daily
# refreshes the lists and takes apt's lock in the middle of a role's run. Masked, so that every change on a node
# is one a test made.
for unit in apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer fstrim.timer; do
  rm -f "$root/etc/systemd/system/timers.target.wants/$unit"
  ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
# sshd, as on every real node (the lab reaches its nodes over SSH). No host keys in the image: each node gets its own,
# from `nodeforge lab up` (which writes them to the lab's known_hosts) or, in any other container, generated at boot.
rm -f "$root"/etc/ssh/ssh_host_*
mkdir -p "$root/etc/systemd/system/ssh.service.d"
cat >"$root/etc/systemd/system/ssh.service.d/nodeforge-host-keys.conf" <<'UNIT'
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
UNIT
# The test harness's package cache (tools/apt_cache.py), when it answers on the node's gateway; otherwise apt goes
# direct. Only Debian's archives go through it: fixture repositories and vendor mirrors are always fetched direct.
install -m 0755 "$here/apt-proxy-detect" "$root/usr/local/sbin/nodeforge-apt-proxy-detect"
echo 'Acquire::http::Proxy-Auto-Detect "/usr/local/sbin/nodeforge-apt-proxy-detect";' \
  >"$root/etc/apt/apt.conf.d/00nodeforge-proxy"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
# Empty lists must look stale: apt's cache_valid_time reads the age of this directory, and an image built less than
# an hour ago would otherwise skip the first `apt-get update` and find no packages at all.
touch -d @0 "$root/var/lib/apt/lists"

((el)) && bash "$here/el.sh" "$root" "$node_os"
((ubuntu)) && bash "$here/ubuntu.sh" "$root" "$node_os"

tar -C "$root" -c . | podman import \
  --change 'CMD ["/sbin/init"]' \
  --change "LABEL org.nodeforge.build-sha=$sum" \
  --change 'STOPSIGNAL SIGRTMIN+3' \
  - "$image" >/dev/null
echo "built $image ($sum)"
