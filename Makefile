# execserver — the two commands that matter: `make run` and `make test`.
# Everything else is set up on demand: a private virtualenv (.venv), the
# Python packages, and (when running as root) bubblewrap for the sandbox.

# The interpreter the virtualenv is made from (scripts/pick-python says which and
# why: a distribution's optimised build wins a tie). Evaluated only when the
# virtualenv is made; an existing .venv is kept as it is.
PYTHON ?= $(shell scripts/pick-python)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
LISTEN ?= ws://127.0.0.1:8765
PYTEST_ARGS ?=

.PHONY: run test lint format typecheck schema vectors interop bench bench-smoke bench-scale bench-scale-workers reliability system-deps container-deps venv clean image container-test lint-code lint-deploy

# editable_mode=compat: the source tree goes on sys.path through a plain .pth
# line. setuptools' default editable finder imports pathlib, re and
# importlib.util at every interpreter start (~12-16 ms on a 2-vCPU machine),
# which every `execserver` command and every test subprocess would pay.
# setuptools calls compat mode transitional (its warning is silenced); should a
# later setuptools drop it, the install falls back to the default mode.
comma := ,
EDITABLE_INSTALL = PYTHONWARNINGS=ignore::UserWarning $(BIN)/python -m pip install --quiet \
	--config-settings editable_mode=compat -e '$(1)' \
	|| $(BIN)/python -m pip install --quiet -e '$(1)'

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(call EDITABLE_INSTALL,.[dev])
	@touch $@

# The benchmarks also need the `bench` extra (jsonrpcserver for bench_dispatch).
$(BENCH_STAMP): $(STAMP)
	$(call EDITABLE_INSTALL,.[dev$(comma)bench])
	@touch $@

# The programs in C (each one's rule below says why it exists).
EXEC_AS := execserver/processes/native/exec-as
ORPHAN_GUARD := execserver/processes/native/orphan-guard
NATIVE := $(EXEC_AS) $(ORPHAN_GUARD)

venv: $(STAMP) $(NATIVE)

# exec-as (execserver/processes/exec_as.py): a tenant's or cgroup-limited spawn keeps
# the daemon's vfork path. Without the C library on x86-64 and arm64 (its start-up
# would be most of the program's time: see the source), else static on libc, else
# dynamic; without a C compiler the daemon falls back to a slower fork, and says so.
EXEC_AS_NOLIBC := -static -nostdlib -fno-stack-protector -ffreestanding -fno-builtin
$(EXEC_AS): execserver/processes/native/exec_as.c
	@if command -v cc >/dev/null 2>&1; then \
	  cc -O2 -Wall -Wextra $(EXEC_AS_NOLIBC) -o $@ $< 2>/dev/null \
	  || cc -O2 -Wall -Wextra -DEXEC_AS_LIBC -static -o $@ $< 2>/dev/null \
	  || cc -O2 -Wall -Wextra -DEXEC_AS_LIBC -o $@ $<; \
	else \
	  echo "warning: no C compiler; tenants' and cgroup-limited spawns fall back to fork (install gcc)"; \
	fi

# orphan-guard (execserver/processes/orphan_guard.py): what a daemon started dies with
# it even when it is SIGKILLed. Static when the C library allows it; without a C
# compiler the daemon runs without it, and says so at start-up.
$(ORPHAN_GUARD): execserver/processes/native/orphan_guard.c
	@if command -v cc >/dev/null 2>&1; then \
	  cc -O2 -Wall -Wextra -static -o $@ $< 2>/dev/null \
	  || cc -O2 -Wall -Wextra -o $@ $<; \
	else \
	  echo "warning: no C compiler; a SIGKILLed daemon's processes outlive it (install gcc)"; \
	fi

# The sandbox needs bubblewrap; install it when missing and we may (root + apt).
system-deps:
	@if ! command -v bwrap >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing bubblewrap (sandbox backend)"; \
	    (apt-get install -y -qq bubblewrap >/dev/null 2>&1 || \
	     (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1)) || \
	     echo "warning: could not install bubblewrap; sandboxed requests will fail closed"; \
	  else \
	    echo "warning: bwrap not found; sandboxed requests will fail closed (install bubblewrap)"; \
	  fi; \
	fi

# The daemon, the suite and the benchmarks run with bytecode caching on, whatever
# PYTHONDONTWRITEBYTECODE says (set on some CI machines and shells): a sandboxed
# fs helper cannot write the cache itself, and without one each helper (one per
# sandbox policy) compiled its modules from source: 100 ms to import them
# instead of 20-32, and 0.8 MB more RSS (mean of 6). The caches are the usual
# __pycache__ directories, ignored by git.
WITH_BYTECODE := env -u PYTHONDONTWRITEBYTECODE

run: $(STAMP) $(NATIVE) system-deps
	$(WITH_BYTECODE) $(BIN)/execserver serve --listen $(LISTEN)

lint: lint-code lint-deploy

lint-code: $(STAMP)
	$(BIN)/ruff check execserver tests benchmarks scripts
	$(BIN)/ruff format --check execserver tests benchmarks scripts

# Deployment files: hadolint on the Dockerfile, checkov on the Kubernetes manifests,
# and the manifests against the Kubernetes JSON schemas (offline, bundled with
# kubernetes-validate). These tools are heavy (checkov), so they live in their own
# virtualenv and the main one stays lean.
LINT_VENV  := .venv-lint
LINT_BIN   := $(LINT_VENV)/bin
LINT_STAMP := $(LINT_VENV)/.installed
K8S_VERSION ?= 1.33.0

$(LINT_STAMP): deploy/lint-requirements.txt
	@test -x $(LINT_BIN)/python || $(PYTHON) -m venv $(LINT_VENV)
	$(LINT_BIN)/python -m pip install --quiet --upgrade pip
	$(LINT_BIN)/python -m pip install --quiet -r deploy/lint-requirements.txt
	@touch $@

# deploy/k8s/agent-sandbox/: custom resources, checked against the vendored CRDs'
# own schemas by scripts/validate_crs.py (their embedded pod template against the
# Kubernetes schemas too). checkov does not look inside custom resources, so the
# script writes the embedded pod (and the NetworkPolicy the controller makes for
# it) to AGENT_SANDBOX_PODS for a second checkov run.
AGENT_SANDBOX_CRDS := deploy/vendor/agent-sandbox-crds
AGENT_SANDBOX_MANIFESTS := $(filter-out %/kustomization.yaml,$(wildcard deploy/k8s/agent-sandbox/*.yaml))
AGENT_SANDBOX_PODS := $(LINT_VENV)/agent-sandbox-pods

lint-deploy: $(LINT_STAMP)
	$(LINT_BIN)/hadolint Dockerfile
	$(LINT_BIN)/checkov --quiet --compact --skip-download --framework kubernetes --directory deploy/k8s
	$(LINT_BIN)/kubernetes-validate --strict --kubernetes-version $(K8S_VERSION) \
	  $(filter-out %/kustomization.yaml,$(wildcard deploy/k8s/*.yaml deploy/k8s/tenants/*.yaml))
	rm -rf $(AGENT_SANDBOX_PODS)
	$(LINT_BIN)/python scripts/validate_crs.py --crds $(AGENT_SANDBOX_CRDS) \
	  --kubernetes-version $(K8S_VERSION) --pods-out $(AGENT_SANDBOX_PODS) $(AGENT_SANDBOX_MANIFESTS)
	$(LINT_BIN)/checkov --quiet --compact --skip-download --framework kubernetes \
	  --directory $(AGENT_SANDBOX_PODS)

format: $(STAMP)
	$(BIN)/ruff check --fix execserver tests benchmarks scripts
	$(BIN)/ruff format execserver tests benchmarks scripts

# The benchmarks are type-checked against their own extra (jsonrpcserver) too.
typecheck: $(BENCH_STAMP)
	$(BIN)/mypy execserver scripts tests benchmarks

# Code lint only: the deployment linters run in `make lint` (and CI) from their own
# venv. That venv is still made here: one test checks the agent-sandbox pod against
# the Kubernetes schemas with its kubernetes-validate, and the suite skips nothing.
#
# The suite runs on TEST_WORKERS pytest-xdist workers (3 on 2 cores: a worker spends
# much of its time waiting for daemons and their children), each with one shared
# daemon (tests/support/shared_daemon.py), the longest tests first
# (tests/support/ordering.py). The tests that measure a daemon's memory, fds or
# growth under a load of their own (SERIAL_TESTS: the memory bounds, the
# disconnect storm) then run in a second pytest, apart from the rest (whose
# hundreds of daemons would skew what they measure) but side by side with each
# other: their loads are no more than the two CPU hogs they must also pass under
# (the suite's loaded runs), and the suite's time has a target. The soak
# (ALONE_TESTS) runs last, by itself: it compares the daemon's settled RSS after
# two phases of the same load, and when the other tests ended during its first
# phase its second ran alone, faster, and its buffers' high-water mark (kept by
# the allocator) rose past the bound (once in a quiet run: 68.1 MB against 67.6).
# The crash storm, the faults, the fuzzers, the container image and the reference
# interop check outcomes, not figures, and run with the rest. Each run lists its slowest tests (the suite's time has a
# target: docs/development.md); the last line is the wall time of all three.
#
# The suite runs with bytecode caching on (WITH_BYTECODE, above): without it every
# Python process the suite starts compiles every module it imports from source,
# each time. On a fresh clone (no __pycache__ yet) that made a daemon's start
# 0.51 s instead of 0.29 s (median of 10, 2 cores), and each worker's collection
# 11.2 s of CPU instead of 6.0 s (pytest keeps its assertion-rewritten test
# modules only when it may write bytecode).
TEST_WORKERS ?= 3
PYTEST := $(WITH_BYTECODE) $(BIN)/pytest
SERIAL_TESTS := tests/reliability/test_memory.py tests/reliability/test_disconnect_storm.py
ALONE_TESTS := tests/reliability/test_soak.py
test: $(STAMP) $(NATIVE) $(LINT_STAMP) system-deps container-deps lint-code typecheck
	@start=$$(date +%s); status=0; \
	$(PYTEST) -n $(TEST_WORKERS) --dist loadgroup --durations=15 \
	  $(SERIAL_TESTS:%=--ignore=%) $(ALONE_TESTS:%=--ignore=%) $(PYTEST_ARGS) || status=$$?; \
	$(PYTEST) -n $(TEST_WORKERS) --durations=10 $(SERIAL_TESTS) $(PYTEST_ARGS) || { s=$$?; [ $$s = 5 ] || status=$$s; }; \
	$(PYTEST) -p no:xdist --durations=5 $(ALONE_TESTS) $(PYTEST_ARGS) || { s=$$?; [ $$s = 5 ] || status=$$s; }; \
	echo "make test: the three pytest runs took $$(( $$(date +%s) - start )) s (exit status $$status)"; \
	exit $$status

schema: $(STAMP)
	$(BIN)/python -m execserver.wire.schema protocol/schema

# Re-record protocol/vectors from the reference server (scripts/reference.py installs
# it from npm, pinned and integrity-checked, on first use).
vectors: $(STAMP)
	$(BIN)/python -m tests.support.vectors record

interop: $(STAMP) $(NATIVE) system-deps
	$(WITH_BYTECODE) $(BIN)/pytest -m interop $(PYTEST_ARGS)

bench: $(BENCH_STAMP) $(NATIVE) system-deps
	$(WITH_BYTECODE) $(BIN)/python -m benchmarks.run

bench-smoke: $(BENCH_STAMP) $(NATIVE) system-deps
	$(WITH_BYTECODE) $(BIN)/python -m benchmarks.run --smoke

# N = 1, 10, 100, 1,000 agents against both servers (docs/scale.md);
# BENCH_SCALE_ARGS=--smoke for N = 1 and 10, a few seconds each.
BENCH_SCALE_ARGS ?=
bench-scale: $(BENCH_STAMP) $(NATIVE) system-deps
	$(WITH_BYTECODE) $(BIN)/python -m benchmarks.scale $(BENCH_SCALE_ARGS)

# 1,000 agents against two execserver daemons side by side and against one: the
# best case of worker processes (docs/scale.md).
bench-scale-workers: $(BENCH_STAMP) $(NATIVE) system-deps
	$(WITH_BYTECODE) $(BIN)/python -m benchmarks.scale_workers $(BENCH_SCALE_ARGS)

# The full reliability suite (100k fuzz messages, 1,000-cycle storms, 1 GB
# outputs, 10,000 processes, 10-minute soak); `make test` runs a bounded subset.
reliability: $(STAMP) $(NATIVE) system-deps
	RELIABILITY_SCALE=full $(BIN)/pytest -s tests/reliability $(PYTEST_ARGS)

# The container image, built with podman (rootful, no daemon; installed with apt
# when missing). Where no container registry is reachable, a Debian bookworm base
# is made locally with debootstrap (deploy/image/build.sh).
IMAGE ?= localhost/execserver:dev

image:
	deploy/image/build.sh $(IMAGE)

# Podman for the container tests (make test runs them with the rest; without podman
# they skip, saying so): installed with apt when missing and we may (root + apt).
container-deps:
	@if ! command -v podman >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing podman (the container tests)"; \
	    (apt-get install -y -qq podman runc debootstrap >/dev/null 2>&1 || \
	     (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq podman runc debootstrap >/dev/null 2>&1)) || \
	     echo "warning: could not install podman; the container tests will skip"; \
	  else \
	    echo "warning: podman not found; the container tests will skip (install podman)"; \
	  fi; \
	fi

# Builds the image and runs it with the documented security options (tests/container).
container-test: $(STAMP) $(NATIVE) system-deps container-deps
	$(BIN)/pytest -m container tests/container $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(LINT_VENV) $(NATIVE) .mypy_cache .ruff_cache .pytest_cache .hypothesis *.egg-info
