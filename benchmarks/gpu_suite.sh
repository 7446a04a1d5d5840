#!/usr/bin/env bash
# One command for the GPU (issue 18, item 6):
#
#   bash benchmarks/gpu_suite.sh [--smoke] [--out DIR] [--data TARBALL] [--wheels DIR] [options]
#
# Runs benchmarks/gpu_suite.py (see its docstring, or --help, for the parts and options): a
# bf16 channels_last training step of every image backbone, CIFAR-10 end to end with CSQ vs
# CSQ_D, the images/s of training and encoding, one epoch of the 50,000 training images, and
# the paper's Table 1 timing; it writes gpu_suite.json and gpu_suite.md into --out. Under 9
# minutes on one CUDA device; --smoke runs the same code at tiny sizes, on the CPU if needed.
#
# Python: $PYTHON if set, else the repository's .venv if its torch imports, else python3.
# This checkout's src/ goes first on PYTHONPATH, so the package needs no install.
# --wheels DIR: install the wheels in DIR (pip --no-index --no-deps) into a temporary folder
# put on PYTHONPATH first, for a machine that lacks some of lbhash's dependencies and cannot
# reach a package index (e.g. pydantic).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"   # paths given stay relative to the caller's folder

args=()
wheels=""
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) [ $# -ge 2 ] || { echo "error: --wheels needs a folder" >&2; exit 2; }
                  wheels="$2"; shift 2 ;;
        --wheels=*) wheels="${1#--wheels=}"; shift ;;
        *) args+=("$1"); shift ;;
    esac
done

if [ -n "${PYTHON:-}" ]; then
    py="$PYTHON"
elif [ -x "$repo/.venv/bin/python" ] && "$repo/.venv/bin/python" -c "import torch" >/dev/null 2>&1; then
    py="$repo/.venv/bin/python"
else
    py=python3
fi

if [ -n "$wheels" ]; then
    [ -d "$wheels" ] || { echo "error: --wheels $wheels: no such folder" >&2; exit 2; }
    site="$(mktemp -d "${TMPDIR:-/tmp}/lbhash-gpu-suite-site.XXXXXX")"
    trap 'rm -rf "$site"' EXIT
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$wheels"/*.whl
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi

export PYTHONPATH="$repo/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
"$py" "$repo/benchmarks/gpu_suite.py" ${args[@]+"${args[@]}"}
