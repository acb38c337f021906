#!/usr/bin/env bash
# Byte-compiles a virtualenv that pip installed with --no-compile, less its ansible_collections/ tree.
#   tools/compile_venv.sh VENV
# These machines set PYTHONDONTWRITEBYTECODE=1: a module without a .pyc is compiled again by every process that imports
# it (ansible-playbook --version: 0.64 CPU-s with them, 1.87 without), so the virtualenv must be compiled once. Not the
# collections that the `ansible` package carries (two thirds of its files): ansible-core's collection loader compiles
# collection code from its source and never reads a .pyc (utils/collection_loader/_collection_finder.py, get_code), so
# pip compiling them was 30 s of each install spent on files nothing reads. One process: `-j 0` took more time and
# twice the CPU on 2 cores. docs/testing.md, "Where make test's time goes".
set -euo pipefail
venv=$1
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# compileall's failures (a file in a syntax this Python does not read) are reported, as pip would not: nothing imports
# such a file on this Python, so they do not fail the install.
if ! out=$("$venv/bin/python" -m compileall -q -x '/ansible_collections/' "$site" 2>&1); then
  echo "compile_venv: some files of $site could not be byte-compiled (Python compiles them when imported, if ever):"
  printf '%s\n' "${out:0:4000}"
fi
