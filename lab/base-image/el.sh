#!/usr/bin/env bash
# Turns a Debian 12 root (lab/base-image/build.sh, NODEFORGE_NODE_OS=rocky8|rocky9|rhel8|rhel9) into an EL tier node:
# Rocky's or RHEL's identity (os-release, redhat-release: Ansible's facts say distribution Rocky or RedHat, family
# RedHat, package manager dnf), Debian's real dnf 4.14 and rpm 4.18 over an rpm database at /var/lib/rpm that holds the
# EL userland of lab/base-image/el-userland.yml (header-only entries, rpm --justdb), /etc/yum.repos.d and
# /etc/pki/rpm-gpg. What is real and what is modelled: docs/testing.md, "The EL tier".
#   lab/base-image/el.sh ROOT OS
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
root=$1
node_os=$2
case $node_os in
  rocky9 | rhel9) version=9.4 ;;
  rocky8 | rhel8) version=8.10 ;;
  *) echo "error: el.sh: no EL identity for $node_os (rocky8, rocky9, rhel8, rhel9)" >&2; exit 2 ;;
esac
major=${version%%.*}

# Identity, as a Rocky or RHEL install has it; Debian's own files would make Ansible see Debian.
rm -f "$root/etc/os-release" "$root/usr/lib/os-release" "$root/etc/debian_version" "$root/etc/lsb-release"
case $node_os in
  rocky*)
    codename=$( ((major == 9)) && echo "Blue Onyx" || echo "Green Obsidian")
    cat >"$root/usr/lib/os-release" <<RELEASE
NAME="Rocky Linux"
VERSION="$version ($codename)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="$version"
PLATFORM_ID="platform:el$major"
PRETTY_NAME="Rocky Linux $version ($codename)"
ANSI_COLOR="0;32"
LOGO="fedora-logo-icon"
CPE_NAME="cpe:/o:rocky:rocky:$major::baseos"
HOME_URL="https://rockylinux.org/"
BUG_REPORT_URL="https://bugs.rockylinux.org/"
ROCKY_SUPPORT_PRODUCT="Rocky-Linux-$major"
ROCKY_SUPPORT_PRODUCT_VERSION="$version"
REDHAT_SUPPORT_PRODUCT="Rocky Linux"
REDHAT_SUPPORT_PRODUCT_VERSION="$version"
RELEASE
    echo "Rocky Linux release $version ($codename)" >"$root/etc/rocky-release"
    ln -s rocky-release "$root/etc/redhat-release"
    ln -s rocky-release "$root/etc/system-release"
    echo "cpe:/o:rocky:rocky:$major::baseos" >"$root/etc/system-release-cpe"
    ;;
  rhel*)
    codename=$( ((major == 9)) && echo "Plow" || echo "Ootpa")
    cat >"$root/usr/lib/os-release" <<RELEASE
NAME="Red Hat Enterprise Linux"
VERSION="$version ($codename)"
ID="rhel"
ID_LIKE="fedora"
VERSION_ID="$version"
PLATFORM_ID="platform:el$major"
PRETTY_NAME="Red Hat Enterprise Linux $version ($codename)"
ANSI_COLOR="0;31"
LOGO="fedora-logo-icon"
CPE_NAME="cpe:/o:redhat:enterprise_linux:$major::baseos"
HOME_URL="https://www.redhat.com/"
DOCUMENTATION_URL="https://access.redhat.com/documentation/en-us/red_hat_enterprise_linux/$major"
BUG_REPORT_URL="https://issues.redhat.com/"
REDHAT_BUGZILLA_PRODUCT="Red Hat Enterprise Linux $major"
REDHAT_BUGZILLA_PRODUCT_VERSION=$version
REDHAT_SUPPORT_PRODUCT="Red Hat Enterprise Linux"
REDHAT_SUPPORT_PRODUCT_VERSION="$version"
RELEASE
    echo "Red Hat Enterprise Linux release $version ($codename)" >"$root/etc/redhat-release"
    ln -s redhat-release "$root/etc/system-release"
    echo "cpe:/o:redhat:enterprise_linux:$major::baseos" >"$root/etc/system-release-cpe"
    ;;
esac
ln -s ../usr/lib/os-release "$root/etc/os-release"

# rpm's database where EL keeps it (Debian's rpm defaults to ~/.rpmdb), dnf's directories.
mkdir -p "$root/etc/rpm" "$root/etc/yum.repos.d" "$root/etc/pki/rpm-gpg" "$root/var/lib/rpm"
echo "%_dbpath /var/lib/rpm" >"$root/etc/rpm/macros.dbpath"
# dnf's plugins as EL's python3-dnf-plugins-core has them: the ones EL ships in packages of their own (the roles
# install python3-dnf-plugin-versionlock) are set aside, for those packages' stand-ins to put back
# (molecule/fixture_repo/specs/el<major>_appstream.yml); until then dnf has no versionlock command, as on EL.
plugins=$root/usr/lib/python3/dist-packages/dnf-plugins
mkdir -p "$root/usr/share/nodeforge-el-tier/dnf-plugins"
for plugin in leaves local modulesync post-transaction-actions show_leaves versionlock; do
  mv "$plugins/$plugin.py" "$root/usr/share/nodeforge-el-tier/dnf-plugins/"
  rm -f "$plugins"/__pycache__/"$plugin".*.pyc "$root/etc/dnf/plugins/$plugin.conf"
done
rm -f "$root/etc/dnf/plugins/versionlock.list"
cat >"$root/etc/dnf/dnf.conf" <<CONF
[main]
gpgcheck=1
installonly_limit=3
clean_requirements_on_remove=True
best=True
skip_if_unavailable=False
CONF

userland=$(mktemp -d /var/tmp/nodeforge-userland.XXXXXX)
trap 'rm -rf "$userland"' EXIT
python3 "$repo/molecule/fixture_repo/fixture_rpm.py" userland --spec "$here/el-userland.yml" --os "$node_os" \
  --out "$userland" >/dev/null
rpm --root "$root" --dbpath /var/lib/rpm --initdb
rpm --root "$root" --dbpath /var/lib/rpm --install --justdb --nodeps --noscripts --nosignature "$userland"/*/*.rpm
