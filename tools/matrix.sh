#!/usr/bin/env bash
# The CI matrix's other legs, beside make test's main session (the README's path: the machine's python3 and the
# ansible-core pip gives it). Each leg has its own virtualenv and names its ansible-core and Python in its output;
# a leg that cannot start (no Python for it, an install that fails) fails, it is never skipped.
#   tools/matrix.sh setup           build or refresh both legs' virtualenvs
#   tools/matrix.sh newest          ansible-core 2.21 (Python 3.12 or newer): the unit tests, the local playbook
#                                   tests, `nodeforge check` of every sample (CLI and ansible-playbook), `k8s render`
#                                   of one sample, and a lab node's provision and no-op re-provision (0 changed)
#   tools/matrix.sh floor           ansible-core 2.16 (Python 3.11 or 3.12: the plugins use tomllib): the
#                                   collection's syntax check, the validation play (every role's argument specs, the
#                                   rules) through ansible-playbook on every inventory case of tests/test_checks.py,
#                                   the collection module that reads ansible-core's non-public AnsibleModule._diff
#                                   (module_utils/upstream.py), and molecule's preflight scenario
set -euo pipefail
cd "$(dirname "$0")/.."

NEWEST=(ansible-core'>=2.21,<2.22' ansible'>=14,<15')
FLOOR=(ansible-core'>=2.16,<2.17' ansible'>=9,<10')
# What the floor leg's tests import besides Ansible (nodeforge itself goes in without its dependencies: the CLI's
# own floor is ansible-core 2.18, the collection's 2.16).
FLOOR_TOOLS=(click rich ansible-runner jsonschema kubernetes-validate pyyaml jinja2 pytest pytest-xdist pytest-timeout
  molecule 'molecule-plugins[podman]' pytest-testinfra)

die() { echo "matrix: $*" >&2; exit 1; }

# The newest Python 3.LO..3.HI that this machine has: python3, python3.N on PATH, then pyenv's versions.
find_python() {
  local lo=$1 hi=$2 best="" best_minor=-1 candidate minor
  local candidates=(python3)
  for ((minor = hi; minor >= lo; minor--)); do candidates+=("python3.$minor"); done
  if command -v pyenv >/dev/null; then
    for candidate in "$(pyenv root)"/versions/3.*/bin/python3; do candidates+=("$candidate"); done
  fi
  for candidate in "${candidates[@]}"; do
    command -v "$candidate" >/dev/null || [[ -x $candidate ]] || continue
    minor=$("$candidate" -c 'import sys; print(sys.version_info[1] if sys.version_info[0] == 3 else -1)' 2>/dev/null) ||
      continue
    if ((minor >= lo && minor <= hi && minor > best_minor)); then
      best=$(command -v "$candidate" || echo "$candidate")
      best_minor=$minor
    fi
  done
  [[ -n $best ]] && echo "$best"
}

python_for() {
  case $1 in
    newest) find_python 12 14 || die "leg newest: no Python 3.12 to 3.14 on this machine (python3, python3.1x, $(
      command -v pyenv >/dev/null && pyenv root || echo 'no pyenv')/versions); ansible-core 2.21 needs one" ;;
    floor) find_python 11 12 || die "leg floor: no Python 3.11 or 3.12 on this machine (python3, python3.1x, $(
      command -v pyenv >/dev/null && pyenv root || echo 'no pyenv')/versions); ansible-core 2.16 needs one" ;;
  esac
}

venv_for() { echo ".venv-$1"; }

build() {
  local leg=$1 venv python want
  venv=$(venv_for "$leg")
  python=$(python_for "$leg")
  want=$( (echo "$leg $python"; declare -p NEWEST FLOOR FLOOR_TOOLS; cat pyproject.toml) | sha256sum | cut -c1-16)
  [[ -x $venv/bin/python && "$(cat "$venv/.nodeforge-installed" 2>/dev/null)" == "$want" ]] && return 0
  echo "matrix: leg $leg: virtualenv $venv ($python)"
  rm -rf "$venv"
  "$python" -m venv "$venv" || die "leg $leg: $python -m venv failed"
  "$venv/bin/pip" install -q --upgrade pip >/dev/null || die "leg $leg: pip upgrade failed"
  if [[ $leg == newest ]]; then
    "$venv/bin/pip" install -q --no-compile -e '.[test]' "${NEWEST[@]}" || die "leg newest: pip install failed"
  else
    "$venv/bin/pip" install -q --no-compile "${FLOOR[@]}" "${FLOOR_TOOLS[@]}" || die "leg floor: pip install failed"
    "$venv/bin/pip" install -q --no-deps -e . || die "leg floor: pip install -e . failed"
  fi
  # Byte-compiled once, less the collections (tools/compile_venv.sh says why).
  bash tools/compile_venv.sh "$venv" || die "leg $leg: byte-compiling the virtualenv failed"
  echo "$want" >"$venv/.nodeforge-installed"
}

# "ansible-core 2.21.5 on Python 3.12.1", read from the leg's own interpreter.
versions() {
  "$(venv_for "$1")/bin/python" -c 'import importlib.metadata as m, platform
print("ansible-core", m.version("ansible-core"), "on Python", platform.python_version())'
}

leg_newest() {
  local venv status=0
  venv=$(venv_for newest)
  echo "matrix: leg newest: $(versions newest)"
  "$venv/bin/pytest" -q -p no:cacheprovider -n 2 -m "not slow and not molecule" || status=$?
  # The slow tests of these files: their fast ones ran in the line above. The validation play runs here through
  # ansible-playbook on every sample and in the lab's provision; its per-rule inventory cases (the rest of
  # tests/test_checks.py's ansible-playbook half, 114 runs) run on 2.19 in the main leg and on 2.16 in the floor leg.
  "$venv/bin/pytest" -q -p no:cacheprovider -n 2 --dist load --maxschedchunk 1 -m "slow and not molecule" \
    tests/test_runner.py tests/test_ansible_settings.py tests/test_checks.py::test_sample_inventories_are_valid \
    "tests/test_k8s_render.py::test_render_writes_valid_objects_for_each_sample[dgx1-openshift]" \
    tests/test_reboot_play.py tests/test_apt_lists.py tests/test_preflight_filters.py tests/test_strict_conditionals.py \
    tests/test_lab.py::test_lab_provisions_a_node_and_reprovisions_it_changing_nothing || status=$?
  return $status
}

leg_floor() {
  local venv status=0 playbook
  venv=$(venv_for floor)
  echo "matrix: leg floor: $(versions floor)"
  for playbook in collections/ansible_collections/nodeforge/gpu/playbooks/*.yml; do
    ANSIBLE_COLLECTIONS_PATH=$PWD/collections "$venv/bin/ansible-playbook" --syntax-check -i localhost, \
      "nodeforge.gpu.$(basename "$playbook" .yml)" >/dev/null || { echo "matrix: floor: syntax check of $playbook failed"; status=1; }
  done
  # The validation play through ansible-playbook on every inventory case (the CLI's own cases need core 2.18).
  "$venv/bin/pytest" -q -p no:cacheprovider -n 2 tests/test_checks.py -k "ansible-playbook" || status=$?
  # The collection code that reads what ansible-core has no public interface for (module_utils/upstream.py), and the
  # rule that nothing else does.
  "$venv/bin/pytest" -q -p no:cacheprovider tests/test_managed_files.py tests/test_public_ansible_api.py || status=$?
  NODEFORGE_VENV=$PWD/$venv bash molecule/run.sh preflight || { echo "matrix: floor: molecule preflight failed"; status=1; }
  return $status
}

case ${1:-} in
  setup) build newest; build floor ;;
  newest | floor)
    build "$1"
    start=$(date +%s)
    status=0
    "leg_$1" || status=$?
    verdict=$([[ $status -eq 0 ]] && echo passed || echo "FAILED (exit $status)")
    echo "matrix: leg $1 ($(versions "$1")): $verdict in $(($(date +%s) - start)) s"
    exit $status
    ;;
  *) echo "usage: $0 setup|newest|floor" >&2; exit 2 ;;
esac
