# make demo | make test | make bench -- each creates .venv on first use.
#
# The interpreter .venv is made from (PYTHON=... picks another): the distribution's python3 where it
# is 3.11 or newer and has venv and the C headers, else the first python3 on PATH. A distribution's
# build (Debian, Ubuntu, Fedora) is compiled with profile-guided and link-time optimisation into one
# static binary; pyenv's default build is neither, and the engine runs ~20 % slower on it (README,
# Quickstart). `make clean` first to move an existing .venv to another interpreter.
SYSTEM_PYTHON := /usr/bin/python3
PYTHON ?= $(shell $(SYSTEM_PYTHON) -c 'import ensurepip, os, sys, sysconfig, venv; \
	sys.exit(sys.version_info < (3, 11) or not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
	2>/dev/null && echo $(SYSTEM_PYTHON) || echo python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test bench install compiled clean browser

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || (rm -rf $(VENV) && python3 -m venv $(VENV))
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,compiled]'
	touch $(STAMP)

install: $(STAMP)

# The engine's hot modules compiled to C (simulator/compiled.py): under two minutes after a source
# changed, a hash check otherwise. Without a C compiler it says so and the engine runs as Python.
compiled: $(STAMP)
	$(BIN)/infersim compile --if-stale

demo: compiled
	$(BIN)/infersim demo -o results/demo

# The report test opens the HTML report in a real headless Chromium (Debian's package).
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  ($(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null)

# One test process per core (pytest-xdist): the suite is CPU-bound and its tests are independent.
test: compiled browser
	$(BIN)/python -m pytest -n auto

# make bench: the quick set; make bench BENCH="--full" (or "--vs-vidur", "--cases ...") for more
bench: compiled
	$(BIN)/python benchmarks/run.py $(BENCH)

clean:
	rm -rf $(VENV) build results runs .pytest_cache .hypothesis
