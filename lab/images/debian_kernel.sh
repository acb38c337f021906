# Recipe of lab/images/build.sh (run with bash -eu as root in the base image, no init, services never started).
# The distro driver scenario's precondition (molecule/nvidia_driver_distro/prepare.yml): the kernel that
# linux-headers-amd64 points to, with initramfs-tools and zstd (its postinst builds the initramfs). Chosen as
# prepare.yml chooses it; should Debian move linux-headers-amd64 on, prepare.yml installs the newer one itself.
apt-get update -qq
kernel=$(apt-cache depends linux-headers-amd64 | sed -n 's/.*Depends: linux-headers-\([^ ]*-amd64\)$/\1/p' | head -1)
[ -n "$kernel" ]
apt-get install -y -qq --no-install-recommends "linux-image-$kernel" initramfs-tools zstd >/dev/null
