# nodeforge validate: the RDMA probe (read-only); markers and probe() from probe-lib.sh.
probe ofed_info ofed_info -s
# rdma-core (the inbox stack) and the DOCA profile package (DOCA's version: ofed_info -s names its MLNX_OFED base).
if command -v dpkg-query >/dev/null 2>&1; then
  probe rdma_core dpkg-query -W -f '${Version}' rdma-core
  probe doca_profile dpkg-query -W -f '${Version}' "$DOCA_PACKAGE"
else
  probe rdma_core rpm -q --qf '%{VERSION}-%{RELEASE}' rdma-core
  probe doca_profile rpm -q --qf '%{VERSION}-%{RELEASE}' "$DOCA_PACKAGE"
fi
probe ibstat ibstat
probe memory_peers sh -c 'cat /sys/kernel/mm/memory_peers/*/version'
for service in $SERVICES; do
  probe "memlock_$service" systemctl show -p LoadState -p LimitMEMLOCK "$service"
done
true
