#!/usr/bin/env bash
# Gives a Debian root (lab/base-image/build.sh, NODEFORGE_NODE_OS=ubuntu22.04|ubuntu24.04) Ubuntu's identity:
# os-release and lsb-release as Ubuntu ships them, so that Ansible's facts say distribution Ubuntu (family Debian)
# and the roles take their Ubuntu branches (vars/Ubuntu.yml: repository paths ubuntu2204/ubuntu2404, Canonical's
# package names, netplan). The userland beneath is Debian's: Debian 12 under 22.04, Debian 13 under 24.04 (the
# closest in kernel, Python and apt), with Debian's archive. What is real and what is modelled: docs/testing.md,
# "Node OSes".
#   lab/base-image/ubuntu.sh ROOT OS
set -euo pipefail

root=$1
node_os=$2
case $node_os in
  ubuntu22.04) version=22.04 full="22.04.5 LTS" codename=jammy name="Jammy Jellyfish" ;;
  ubuntu24.04) version=24.04 full="24.04.3 LTS" codename=noble name="Noble Numbat" ;;
  *) echo "error: ubuntu.sh: no Ubuntu identity for $node_os (ubuntu22.04, ubuntu24.04)" >&2; exit 2 ;;
esac

rm -f "$root/etc/os-release" "$root/usr/lib/os-release"
cat >"$root/usr/lib/os-release" <<RELEASE
PRETTY_NAME="Ubuntu $full"
NAME="Ubuntu"
VERSION_ID="$version"
VERSION="$full ($name)"
VERSION_CODENAME=$codename
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
SUPPORT_URL="https://help.ubuntu.com/"
BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"
PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"
UBUNTU_CODENAME=$codename
LOGO=ubuntu-logo
RELEASE
ln -s ../usr/lib/os-release "$root/etc/os-release"
cat >"$root/etc/lsb-release" <<RELEASE
DISTRIB_ID=Ubuntu
DISTRIB_RELEASE=$version
DISTRIB_CODENAME=$codename
DISTRIB_DESCRIPTION="Ubuntu $full"
RELEASE
