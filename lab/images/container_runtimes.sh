# Recipe of lab/images/build.sh (run with bash -eu as root in the base image, no init, services never started).
# The container toolkit scenarios' precondition (molecule/nvidia_container_toolkit/tasks/node_common.yml): Debian's
# containerd and Docker, installed as that task installs them. Their units are left disabled: prepare.yml writes
# daemon.json first, then starts and enables them (with the units enabled here, dockerd would start at boot with a
# configuration prepare.yml has not written yet).
apt-get update -qq
# Debian 13 ships the docker CLI as docker-cli (Debian 12's docker.io carries it).
cli=$(apt-cache show docker-cli >/dev/null 2>&1 && echo docker-cli || true)
apt-get install -y -qq --no-install-recommends containerd docker.io $cli >/dev/null
rm -f /etc/systemd/system/multi-user.target.wants/containerd.service /etc/systemd/system/multi-user.target.wants/docker.service
