#!/bin/bash
# nodeforge fixture stand-in for MLNX_OFED's uninstall.sh (installed as /usr/sbin/ofed_uninstall.sh): asks for
# confirmation unless --force, records the run in /var/log/nodeforge-fixture/ofed_uninstall.log and removes what the
# stand-in installer installed.
set -euo pipefail
state=/var/lib/nodeforge-fixture/mlnx_ofed.files
force=0
for arg; do
  case $arg in
    --force) force=1 ;;
    --keep-kernel-modules | -q) ;;
    *) echo "Unsupported argument: $arg" >&2; exit 1 ;;
  esac
done
if [[ $force -ne 1 ]]; then
  read -r -p "This program will uninstall all OFED packages on your machine. Do you want to continue?[y/N]:" answer || answer=
  [[ $answer == [yY]* ]] || { echo "Aborted."; exit 1; }
fi
mkdir -p /var/log/nodeforge-fixture
echo "ofed_uninstall.sh $* (removed $(ofed_info -s 2>/dev/null || echo nothing))" >>/var/log/nodeforge-fixture/ofed_uninstall.log
if [[ -f $state ]]; then
  xargs -r rm -f <"$state"
  rm -f "$state"
fi
echo "Uninstall finished successfully."
