# nodeforge validate: the container runtime probe (read-only): each runtime's own view of its configuration where it
# answers, the configuration files otherwise, the CDI specifications, the OCI hooks; markers and probe() from probe-lib.sh.
if command -v containerd >/dev/null 2>&1; then
  probe containerd_config_dump containerd config dump
else
  printf '@@nodeforge containerd_config_dump rc=127@@\n'
fi
if command -v docker >/dev/null 2>&1; then
  # A Go template: the script reaches the node through a lookup, whose result Ansible never templates.
  probe docker_runtimes docker info --format '{{json .Runtimes}}'
fi
if command -v crio >/dev/null 2>&1; then
  probe crio_config crio config
fi
# FILES: paths and globs, unquoted on purpose so that the shell expands the globs.
for file in $FILES; do
  [ -f "$file" ] && probe "file:$file" cat "$file"
done
probe selinux_stores ls /var/lib/selinux
true
