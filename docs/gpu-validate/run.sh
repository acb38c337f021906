#!/usr/bin/env bash
# Runs `nodeforge validate --perf` on the machine it runs on (the device tool's GPU machine), from the repository
# root, with the wheels in .whl (ansible-core, ansible-runner and their needs; click, rich, PyYAML and Jinja2 are
# the machine's own). Reports go to $OUT (or ./build/gpu-validate).
set -uo pipefail
out=${OUT:-build/gpu-validate}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH:/usr/local/nvidia/bin PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-150}
{
  echo "## host"; uname -a; cat /etc/os-release | head -3; python3 --version
  echo "## nvidia-smi -L"; nvidia-smi -L
  echo "## /proc/driver/nvidia/version"; cat /proc/driver/nvidia/version
  echo "## lsmod | grep nvidia"; grep nvidia /proc/modules
  echo "## modinfo -F version nvidia"; modinfo -F version nvidia
  echo "## tools"; for t in ib_write_bw all_reduce_perf dcgmi ibstat ofed_info nvidia-ctk; do printf '%s: %s\n' "$t" "$(command -v $t || echo absent)"; done
} > "$out/host.txt" 2>&1
# The role's probes as it runs them (roles/validate/files, the query fields of its vars/main.yml): the raw outputs.
query() { python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))[sys.argv[2]])' roles/validate/vars/main.yml "$1"; }
for area in driver rdma runtime; do
  GPU_QUERY=$(query __validate_gpu_query) REMAPPED_QUERY=$(query __validate_remapped_query) \
    SERVICES=containerd FILES= LC_ALL=C sh -c "$(cat roles/validate/files/probe-lib.sh roles/validate/files/probe-$area.sh)"
done > "$out/probes.txt" 2>&1
python3 -m nodeforge check -i docs/gpu-validate/inventory > "$out/check.txt" 2>&1; echo "check rc=$?"
python3 -m nodeforge validate -i docs/gpu-validate/inventory --perf \
  --json "$out/validate.json" --junit "$out/validate.junit.xml" --html "$out/validate.html" --textfile "$out" > "$out/validate.txt" 2>&1
echo "validate rc=$?"
cat "$out/host.txt" "$out/check.txt" "$out/validate.txt"
