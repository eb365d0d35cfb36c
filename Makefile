# `make demo` and `make test` are all a newcomer needs: each builds .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup compile demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# pip >= 25 writes console-script wrappers that do not import `re` (docs/findings.md: imports decide start-up)
	$(PY) -m pip install -q --upgrade 'pip==25.3'
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# Byte-compile up front: with PYTHONDONTWRITEBYTECODE set (as on CI machines) every start would
# otherwise recompile the package, doubling `sandboy run`'s start-up (docs/findings.md). Then the
# run path's byte code in one validated file (ADR 0023: src/sandboy/__pycache__/run-path.*.bundle).
compile: $(STAMP) $(VENV)/.native
	@$(PY) -m compileall -q src >/dev/null
	@$(PY) -c 'import sandboy.bytecode_bundle as b; b.build("src/sandboy")' >/dev/null

# The C executor (and the git check's walk) is built in place by the editable install; rebuild it when its sources change
# (a stale build would lack what newer plans use, e.g. slots and the namespace init).
$(VENV)/.native: src/sandboy/confine/_native.c src/sandboy/confine/_native_walk.c src/sandboy/confine/_native_mac.c $(STAMP)
	$(PY) setup.py -q build_ext --inplace --force >/dev/null 2>&1 || $(PY) -m pip install -q -e '.[test]'
	touch $@

setup: $(STAMP)

demo: compile
	$(PY) examples/demo.py

# The probes run twice: against the C plan executor, then against the pure-Python one that
# stands in where no compiler built it (src/sandboy/confine/_libc.py). The first run includes the
# mutation checks (tests/cage/test_mutations.py: each seccomp rule removed in turn must make a
# probe fail; ≈ 20 s, bounded at 3 min; test_mutations_tier.py: each namespace flag and step of
# the namespace tier, as root and as uid 65534, 6-30 s, bounded at 90 s; test_mutations_protected,
# _gitcheck, _terminal, _egress, _leftovers: the protected defaults, the git check's findings, the
# terminal, Layer 3, the supervisor's sweep/timeout/pids, ≈ 15 s together; docs/threat-model.md
# lists them); the plans are the same for both executors, so once is enough.
test: compile
	$(PY) -m pytest -q
	SANDBOY_NATIVE=0 $(PY) -m pytest -q -m "not mutation" tests/cage

bench: compile
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .cache build src/*.egg-info
