# Recipe of lab/images/build.sh (run with bash -eu as root in the base image, no init, services never started).
# The SELinux scenario's precondition (molecule/selinux_modules/prepare.yml): Debian's reference policy in its policy
# store (the package's postinst builds it with semodule -n: SELinux runs in no kernel here), the policy's devel
# Makefile and headers, the module tools. The role installs the same tools itself and finds them present, as it does
# after prepare.yml.
apt-get update -qq
apt-get install -y -qq --no-install-recommends selinux-policy-default selinux-policy-dev checkpolicy semodule-utils \
  policycoreutils python3-selinux >/dev/null
