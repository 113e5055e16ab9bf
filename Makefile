# Two commands for a new user: `make book` and `make test`. Everything else is optional.
SHELL := /bin/bash
# Python 3.11, 3.12 or 3.13 (the pinned torch and triton have wheels for each):
# the first one found, or `make PYTHON=python3.13 test`.
# (A pyenv shim can exist for a version that is not active, so a candidate must run.)
PYTHON ?= $(firstword $(foreach p,python3.11 python3.12 python3.13,$(if $(shell $(p) -c '' 2>/dev/null && echo ok),$(p))) python3)
VENV := .venv
BIN := $(VENV)/bin
# The stamp names the Python version, so switching PYTHON rebuilds .venv instead of reusing it.
PYVER := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
STAMP := $(VENV)/.installed-$(PYVER)
# The converted model. Defined before `book` and `test` name it as a prerequisite: make
# expands a rule's prerequisites where it reads the rule, so a later definition is empty there.
MODEL_CACHE := _build/modellab/smollm2-135m-instruct-fp32/model.safetensors
JOBS ?= 2

LANGS := zh_CN

.PHONY: help install book book-zh i18n-update i18n-check test test-book test-portable-outputs portable-sse42 portable-avx2 bench exercises solutions grade gradescope release clean

help:
	@echo "make book       install into .venv (first time) and build the HTML book into _build/html (English),"
	@echo "                and its Chinese edition into _build/html/zh_CN"
	@echo "make book-zh    the Chinese edition alone, from the same execution cache"
	@echo "make i18n-update  new English prose -> locales/ (then translate the empty and fuzzy entries)"
	@echo "make test       install if needed and run every check (lint, graders, stubs, catalogue, nbval, book, browser)"
	@echo "make bench      run benchmarks/ and write _build/bench/results.json"
	@echo "make exercises  regenerate exercises/ from solutions/"
	@echo "make solutions  re-execute solutions/ in place (refreshes their stored outputs)"
	@echo "make grade SUBMISSIONS=dir  grade a folder of student submissions into _build/grades"
	@echo "make gradescope [CHAPTERS=1,3] [EXTRA_TESTS=dir] [LATE_PENALTY=0.1:0.5]  the Gradescope autograder: _build/gradescope/autograder.zip, and the container it needs"
	@echo "make release    the student edition (book without solutions, exercises, graders): _build/release/ and .zip"

$(STAMP): requirements.txt requirements-nodeps.txt pyproject.toml
	@case "$(PYVER)" in 3.11|3.12|3.13) ;; *) echo "Python 3.11, 3.12 or 3.13 is needed; '$(PYTHON)' is $(or $(PYVER),not a Python that runs here). Name one: make PYTHON=/path/to/python3.12 ..." >&2; exit 2;; esac
	@if [ -x $(BIN)/python ] && [ "$$($(BIN)/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')" != "$(PYVER)" ]; then \
	  echo "$(VENV) was made with another Python; making it again with $(PYTHON) ($(PYVER))"; rm -rf $(VENV); fi
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements.txt
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps -r requirements-nodeps.txt
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

install: $(STAMP)

# jupyter-cache (execute_notebooks: cache) re-executes only notebooks whose code changed;
# tools.execute_pages runs those side by side first (the build would run them one by one).
# The translated editions follow, from the same cache: they re-execute nothing.
book: $(STAMP) $(MODEL_CACHE)
	$(BIN)/python -m tools.execute_pages
	$(BIN)/jupyter-book build . -W --keep-going
	$(foreach lang,$(LANGS),$(BIN)/python -m tools.i18n build --lang $(lang) &&) true

book-zh: $(STAMP) $(MODEL_CACHE)
	$(BIN)/python -m tools.i18n build --lang zh_CN

# After changing English prose: its messages become empty or fuzzy in locales/ (CONTRIBUTING).
i18n-update: $(STAMP)
	$(foreach lang,$(LANGS),$(BIN)/python -m tools.i18n update --lang $(lang) &&) true

i18n-check: $(STAMP)
	$(foreach lang,$(LANGS),$(BIN)/python -m tools.i18n check --lang $(lang) &&) true

# The real model is de-quantized from its GGUF once per checkout (20 s to minutes on a small
# CPU); do it before the graders, whose per-test timeout must not pay for it.
$(MODEL_CACHE): $(STAMP)
	$(BIN)/python -c "from modellab.load import prepare_cache; prepare_cache()"

test: $(STAMP) $(MODEL_CACHE)
	$(BIN)/ruff check .
	$(BIN)/python -m grading.stubs --check
	$(MAKE) --no-print-directory i18n-check
	$(MAKE) --no-print-directory release
	$(BIN)/python -m pytest -n $(JOBS) --dist loadfile --prove --nbval --nbval-current-env --ignore=tests/browser tests/ solutions/
	$(MAKE) --no-print-directory test-portable-outputs
	$(MAKE) --no-print-directory test-book

# The stored outputs of solutions/ must be the same on every reader's CPU. Replay them
# as two other CPUs would compute: MKL (torch's BLAS) held to SSE4.2 and to AVX2, and
# OpenBLAS (numpy's, used by the Triton interpreter) to the matching core type, on one
# thread and on the default count. A cell that prints rounding noise fails here first.
# OpenBLAS is only pinned to a core type this CPU can run (an unsupported one faults).
HAS_AVX2 := $(shell grep -qw avx2 /proc/cpuinfo 2>/dev/null && echo yes)
PORTABLE_NBVAL := $(BIN)/python -m pytest -p no:grading -n $(JOBS) --dist loadfile --nbval --nbval-current-env -q solutions/
# The two replays run at once (each waits on kernels starting more than it computes);
# make keeps each one's output together.
test-portable-outputs: $(STAMP)
	$(MAKE) --no-print-directory -j2 --output-sync=target portable-sse42 portable-avx2

portable-sse42: $(STAMP)
	MKL_ENABLE_INSTRUCTIONS=SSE4_2 OPENBLAS_CORETYPE=Nehalem OMP_NUM_THREADS=1 $(PORTABLE_NBVAL)

portable-avx2: $(STAMP)
	MKL_ENABLE_INSTRUCTIONS=AVX2 $(if $(HAS_AVX2),OPENBLAS_CORETYPE=Haswell) $(PORTABLE_NBVAL)

# The book build is a check too (warnings are errors); then a real browser opens every page.
# Two browsers, pages dealt one at a time (--dist load): one waits on a page while the other draws.
test-book: book
	$(BIN)/python -m pytest -p no:grading -n $(JOBS) --dist load tests/browser/ -q

bench: $(STAMP)
	$(BIN)/python -m benchmarks

exercises: $(STAMP)
	$(BIN)/python -m grading.stubs

solutions: $(STAMP)
	$(BIN)/python tools/execute_notebooks.py $(or $(NB),solutions/*.ipynb)
	$(BIN)/python -m grading.stubs

grade: $(STAMP)
	@test -n "$(SUBMISSIONS)" || { echo "usage: make grade SUBMISSIONS=dir [OUT=_build/grades] [GRADE_ARGS='--workers 8 --extra-tests dir']"; exit 2; }
	$(BIN)/python -m grading.batch $(SUBMISSIONS) --out $(or $(OUT),_build/grades) $(GRADE_ARGS)

# The autograder zip for Gradescope (docs/instructors.md, "Grading on Gradescope"): every chapter, or CHAPTERS=5.
gradescope: $(STAMP)
	$(BIN)/python -m grading.gradescope build $(if $(CHAPTERS),--chapters $(CHAPTERS)) $(if $(EXTRA_TESTS),--extra-tests $(EXTRA_TESTS)) $(if $(LATE_PENALTY),--late-penalty $(LATE_PENALTY))

# The student edition (docs/instructors.md, "Handing out the student edition"); tests/meta/test_release.py checks it.
release: $(STAMP)
	$(BIN)/python -m grading.release

clean:
	rm -rf _build
