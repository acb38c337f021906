#!/usr/bin/env bash
# Builds the guest image of the lab's VM nodes (`nodeforge lab up --vm`): Debian 12 (bookworm), or Debian 13 (trixie)
# with NODEFORGE_VM_OS=debian13; debootstrap with Debian's kernel, packed into an ext4 disk image with `mkfs.ext4 -d`,
# plus the kernel and initrd that QEMU boots with -kernel/-initrd.
#
# Cached like the container base image: the image lives in DIR/OS-SUM/ (SUM: the sha256 of this script, the OS and the
# files it installs), and is rebuilt only when they change (or NODEFORGE_REBUILD_IMAGE=1). DIR is
# NODEFORGE_VM_IMAGE_DIR, else /var/cache/nodeforge/vm-image as root, ~/.cache/nodeforge/vm-image otherwise. Older
# builds of the same OS there are removed once the new one is complete. Prints the image directory on its last line.
#
# Debian's archive goes through the test harness's package cache (tools/apt_cache.py) when it answers on loopback.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd -P)  # physical: content/lab is a link in an editable install
os=${NODEFORGE_VM_OS:-debian12}
case $os in
  debian12) suite=bookworm ;;
  debian13) suite=trixie ;;
  *) echo "error: NODEFORGE_VM_OS is $os; the VM image is built for debian12 or debian13" >&2; exit 2 ;;
esac
mirror=${NODEFORGE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [[ -n ${NODEFORGE_VM_IMAGE_DIR:-} ]]; then
  dir=$NODEFORGE_VM_IMAGE_DIR
elif [[ $(id -u) -eq 0 ]]; then
  dir=/var/cache/nodeforge/vm-image
else
  dir=$HOME/.cache/nodeforge/vm-image
fi

# The stand-in NVIDIA modules of the fixture CUDA repository's DKMS packages (molecule/fixture_repo/standin-nvidia,
# README.md there), one build per driver version of its spec: a source checkout has them; an installed nodeforge ships
# no test fixtures, and its image carries no stand-ins (no fixture repository to install their packages from either).
fixture=$here/../../molecule/fixture_repo
standin_src=$fixture/standin-nvidia
standin_versions=
if [[ -d $standin_src ]]; then
  standin_versions=$(grep -oE 'PACKAGE_VERSION="[0-9.]+"' "$fixture/specs/nvidia_driver.yml" | cut -d'"' -f2 | sort -u)
  [[ -n $standin_versions ]] || { echo "error: no PACKAGE_VERSION in $fixture/specs/nvidia_driver.yml" >&2; exit 1; }
fi
sum=$({ cat "$0" "$here/nodeforge-vm-seed" "$here/../base-image/apt-proxy-detect"
        [[ -z $standin_versions ]] || cat "$standin_src"/*
        echo "$standin_versions $os"; } | sha256sum | cut -c1-16)
out=$dir/$os-$sum
if [[ -f $out/complete && "${NODEFORGE_REBUILD_IMAGE:-0}" != 1 ]]; then
  echo "$os VM image is current ($sum)" >&2
  echo "$out"
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "error: building the VM image needs root (debootstrap, and mkfs.ext4 -d keeping root's ownership)" >&2
  exit 1
fi
for tool in debootstrap mkfs.ext4; do
  command -v "$tool" >/dev/null || { echo "error: $tool is not installed (apt-get install debootstrap e2fsprogs)" >&2; exit 1; }
done

mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9  # two sessions building at once: the second waits, then finds the image complete
if [[ -f $out/complete && "${NODEFORGE_REBUILD_IMAGE:-0}" != 1 ]]; then
  echo "$out"
  exit 0
fi

root=$(mktemp -d /var/tmp/nodeforge-vmroot.XXXXXX)
work=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$root" "$work" "$root.log"' EXIT
proxy=()
cache=DIRECT
if timeout 1 bash -c 'exec 3<>/dev/tcp/127.0.0.1/3142' 2>/dev/null; then
  cache=http://127.0.0.1:3142
  proxy=(env http_proxy=$cache)
fi
echo "debootstrap $suite with linux-image-amd64 into $root (a few minutes)" >&2
"${proxy[@]}" debootstrap --variant=minbase \
  --include=linux-image-amd64,linux-headers-amd64,dkms,gcc,make,initramfs-tools,systemd,systemd-sysv,udev,dbus,kmod,iproute2,openssh-server,python3,python3-apt,sudo,ca-certificates,gnupg,pciutils,procps \
  "$suite" "$root" "$mirror" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }

cat >"$root/etc/apt/sources.list" <<SRC
deb $mirror $suite main contrib non-free non-free-firmware
deb $mirror $suite-updates main contrib non-free non-free-firmware
deb http://deb.debian.org/debian-security $suite-security main contrib non-free non-free-firmware
SRC
echo "/dev/vda / ext4 rw,errors=remount-ro 0 1" >"$root/etc/fstab"
echo "nodeforge-vm" >"$root/etc/hostname"  # each node's own name comes from the kernel command line (systemd.hostname=)
# As in the container image: Debian's periodic jobs would change a test node on their own schedule.
for unit in apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer fstrim.timer; do
  rm -f "$root/etc/systemd/system/timers.target.wants/$unit"
  ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
# Networking by systemd-networkd: eth0 is QEMU's user network (DHCP; SSH forwarded from the controller's loopback),
# eth1 the private link to the other node of the pair, addressed by nodeforge-vm-seed from what `lab up` passes in.
cat >"$root/etc/systemd/network/10-eth0.network" <<'NET'
[Match]
Name=eth0

[Network]
DHCP=ipv4
NET
ln -sf /lib/systemd/system/systemd-networkd.service "$root/etc/systemd/system/multi-user.target.wants/systemd-networkd.service"
mkdir -p "$root/etc/systemd/system/sockets.target.wants" "$root/etc/systemd/system/network-online.target.wants"
ln -sf /lib/systemd/system/systemd-networkd.socket "$root/etc/systemd/system/sockets.target.wants/systemd-networkd.socket"
ln -sf /lib/systemd/system/systemd-networkd-wait-online.service \
  "$root/etc/systemd/system/network-online.target.wants/systemd-networkd-wait-online.service"
# Each node's identity (its SSH host key, the lab's client key, its address on the private link) comes from `lab up`
# through QEMU's fw_cfg, read by this unit before sshd and networkd start: no host key is generated in the guest.
rm -f "$root"/etc/ssh/ssh_host_*
install -m 0755 "$here/nodeforge-vm-seed" "$root/usr/local/sbin/nodeforge-vm-seed"
cat >"$root/etc/systemd/system/nodeforge-vm-seed.service" <<'UNIT'
[Unit]
Description=nodeforge lab: this VM node's keys and private link address (QEMU fw_cfg)
DefaultDependencies=no
After=local-fs.target
Before=ssh.service systemd-networkd.service network-pre.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/nodeforge-vm-seed

[Install]
WantedBy=multi-user.target
UNIT
ln -sf /etc/systemd/system/nodeforge-vm-seed.service \
  "$root/etc/systemd/system/multi-user.target.wants/nodeforge-vm-seed.service"
install -m 0755 "$here/../base-image/apt-proxy-detect" "$root/usr/local/sbin/nodeforge-apt-proxy-detect"
echo 'Acquire::http::Proxy-Auto-Detect "/usr/local/sbin/nodeforge-apt-proxy-detect";' \
  >"$root/etc/apt/apt.conf.d/00nodeforge-proxy"
# dpkg as in Debian's container images: no fsync per file (the nodes' disks are throwaway overlays; under software
# emulation every sync is slow).
echo force-unsafe-io >"$root/etc/dpkg/dpkg.cfg.d/nodeforge-unsafe-io"
# The guests boot the kernel and initrd QEMU is given (built above, with MODULES=most); an initramfs a role rebuilds in
# a guest (nvidia_driver's, for its nouveau blacklist) takes this machine's modules only: with most of them, one
# rebuild took over six minutes under software emulation.
sed -i 's/^MODULES=.*/MODULES=dep/' "$root/etc/initramfs-tools/initramfs.conf"
# The package lists of the sources above, fetched now (through the package cache when it runs): a node booted within
# the roles' apt cache_valid_time (an hour) of the build finds them current, as a node that ran apt-get update does,
# and its first apt task skips a refresh that takes a minute under software emulation; an older image's lists are
# stale to cache_valid_time, so the roles refresh them. Translations are never fetched.
echo 'Acquire::Languages "none";' >"$root/etc/apt/apt.conf.d/00nodeforge-no-translations"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
resolv=
if [[ ! -e $root/etc/resolv.conf && ! -L $root/etc/resolv.conf ]]; then
  resolv=$root/etc/resolv.conf
  cp /etc/resolv.conf "$resolv"
fi
chroot "$root" apt-get -q -o Acquire::http::Proxy-Auto-Detect= -o "Acquire::http::Proxy=$cache" update \
  >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
[[ -z $resolv ]] || rm -f "$resolv"
# apt's binary package cache of those lists, built here natively: without it, the first apt call in each guest builds
# it under emulation (9 s against 3 s once it exists, measured in a guest).
chroot "$root" apt-cache gencaches >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }

kernel=$(find "$root/boot" -name 'vmlinuz-*' | sort | tail -1)
initrd=$(find "$root/boot" -name 'initrd.img-*' | sort | tail -1)
[[ -f $kernel && -f $initrd ]] || { echo "error: no kernel or initrd in $root/boot" >&2; exit 1; }
kver=$(basename "$kernel" | sed 's/^vmlinuz-//')

# The stand-in NVIDIA modules (when the checkout has them, above), built here against the image's own kernel headers,
# natively: a DKMS build of them in an emulated guest takes minutes. Each version and flavor goes to
# /usr/lib/nodeforge-lab/standin-nvidia/VERSION/FLAVOR/KERNEL/, where the fixture DKMS packages' build step copies
# them from; the boot unit loads the driver, as udev does for a GPU's PCI ID (the VM has no GPU).
for version in $standin_versions; do
  for flavor in open proprietary; do
    rm -rf "$root/tmp/standin-nvidia"
    cp -r "$standin_src" "$root/tmp/standin-nvidia"
    chroot "$root" make -s -C "/lib/modules/$kver/build" M=/tmp/standin-nvidia NV_VERSION="$version" \
      NV_OPEN="$([[ $flavor == open ]] && echo 1 || echo 0)" modules >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
    mkdir -p "$root/usr/lib/nodeforge-lab/standin-nvidia/$version/$flavor/$kver"
    cp "$root"/tmp/standin-nvidia/*.ko "$root/usr/lib/nodeforge-lab/standin-nvidia/$version/$flavor/$kver/"
  done
done
rm -rf "$root/tmp/standin-nvidia"
cat >"$root/etc/systemd/system/nodeforge-standin-gpu.service" <<'UNIT'
[Unit]
Description=nodeforge lab: load the NVIDIA driver at boot, as udev does for a GPU's PCI ID (a VM node has no GPU)
After=systemd-modules-load.service

[Service]
Type=oneshot
RemainAfterExit=yes
# Nothing to load before the driver is installed.
ExecStart=-/sbin/modprobe -a -q nvidia nvidia-uvm

[Install]
WantedBy=multi-user.target
UNIT
ln -sf /etc/systemd/system/nodeforge-standin-gpu.service \
  "$root/etc/systemd/system/multi-user.target.wants/nodeforge-standin-gpu.service"
cp "$kernel" "$work/vmlinuz"
cp "$initrd" "$work/initrd.img"
echo "$kver" >"$work/kernel-release"
# A sparse 16 GiB file system: room for what the roles install, and the free space preflight asks of / and /var
# (preflight_min_free_gb, 10 GiB). Sparse: what the nodes do not write takes no space.
mkfs.ext4 -q -L nodeforge-root -d "$root" "$work/rootfs.img" 16G
chmod 0444 "$work/rootfs.img"  # the nodes' disks are copy-on-write overlays on it; it is never written
touch "$work/complete"
rm -rf "$out"
mv "$work" "$out"
# This OS's older builds, and those named before the OS was part of the name (all of them Debian 12's).
for old in "$dir"/*/; do
  old=${old%/}
  base=${old##*/}
  [[ $old != "$out" ]] || continue
  if [[ $base == "$os"-* || ($os == debian12 && $base =~ ^[0-9a-f]{16}$) ]]; then
    rm -rf "$old"
  fi
done
echo "built $os VM image $out ($(du -sh --apparent-size "$out/rootfs.img" | cut -f1) sparse, $(du -sh "$out/rootfs.img" | cut -f1) used)" >&2
echo "$out"
