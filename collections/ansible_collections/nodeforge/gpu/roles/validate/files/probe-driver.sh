# nodeforge validate: the driver probe (read-only). probe() (probe-lib.sh, run before it)
# prints each command's output and its marker line.
probe proc_version cat /proc/driver/nvidia/version
probe modinfo_version modinfo -F version nvidia
probe modinfo_license modinfo -F license nvidia
probe nvidia_smi nvidia-smi --query-gpu="$GPU_QUERY" --format=csv,noheader
probe nvidia_smi_remapped_rows nvidia-smi --query-remapped-rows="$REMAPPED_QUERY" --format=csv,noheader
probe proc_modules cat /proc/modules
probe sys_module test -d /sys/module
probe sys_module_nouveau test -e /sys/module/nouveau
for tool in all_reduce_perf dcgmi ib_write_bw; do
  probe "tool:$tool" sh -c 'command -v "$1"' sh "$tool"
done
true
