# nodeforge validate: what the probes share, run before each of them (tasks/main.yml joins the two).
# probe NAME COMMAND...: the command's output (stdout and stderr), then the marker line "@@nodeforge NAME rc=N@@" that
# module_utils/validate.py reads back.
probe() {
  name=$1
  shift
  out=$("$@" 2>&1)
  rc=$?
  printf '%s\n@@nodeforge %s rc=%d@@\n' "$out" "$name" "$rc"
}
