# Recipe of lab/images/build.sh (run with bash -eu as root in the base image, no init, services never started).
# The GPUDirect RDMA scenarios' precondition (molecule/gpudirect_rdma/tasks/node_common.yml): Debian's kernel
# headers, DKMS and a compiler, for the stand-in drivers that prepare.yml builds.
apt-get update -qq
apt-get install -y -qq --no-install-recommends linux-headers-amd64 dkms make gcc >/dev/null
