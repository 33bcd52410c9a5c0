# specsweep — the two set-up commands on a fresh machine:
#   make demo    install the CPU stack, build the real SmolLM2-135M model, run the CPU profile end to end
#   make test    install what the tests need and run them (make test-fast: the fast tier only; make test-long:
#                the long tests CI leaves out)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.specsweep-installed
# Every rule runs `python3` from the job's environment: the venv, as if activated.
export PATH := $(abspath $(BIN)):$(PATH)
# A local copy of vLLM's benchmarks/sonnet.txt (checked against the pinned sha256): SONNET=path, else the
# environment's SPECSWEEP_SONNET; empty = the pipeline downloads it from the pinned commit.
SONNET ?= $(SPECSWEEP_SONNET)
SNAKE_CONFIG := $(if $(SONNET),--config sonnet_path=$(abspath $(SONNET)),)

.PHONY: install demo test test-long test-fast lint figures clean-demo chromium slurm shellcheck

$(STAMP): pyproject.toml workflow/scripts/install-cpu.sh
	bash workflow/scripts/install-cpu.sh $(VENV)
	touch $@

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/snakemake --profile profiles/cpu $(SNAKE_CONFIG)

# Debian's chromium: the report test opens the Snakemake report in it, headless.
chromium:
	@command -v chromium >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# Debian's slurm-wlm (slurmctld, slurmd, the clients) and munge: tests/test_slurm.py starts a one-node cluster
# on localhost with them (config, key, socket and state under a temporary folder, /etc/slurm/slurm.conf a link
# to it while the test runs; no daemon is left running).
slurm:
	@PATH="$$PATH:/usr/sbin:/sbin"; command -v slurmctld >/dev/null && command -v slurmd >/dev/null && \
	  command -v munged >/dev/null && command -v sbatch >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null; }

# Two pytest-xdist workers: a 2-core machine otherwise leaves one core idle while a test waits on one engine's
# single-threaded start; the tests that share a real run go to one worker, in order (tests/conftest.py).
# PYTEST_WORKERS=0 runs the suite in this process.
PYTEST_WORKERS ?= 2
PYTEST_ARGS := -q -n $(PYTEST_WORKERS) --dist loadgroup

# CI's command: both tiers but the long tests (marker `long`: each starts engines of its own that no shared run
# stands in for; on 2 cores they were about a third of the suite's time). `make test-long` runs those.
test: $(STAMP) chromium
	$(if $(SONNET),SPECSWEEP_SONNET=$(abspath $(SONNET)),) $(BIN)/python -m pytest $(PYTEST_ARGS) -m "not long"

# The long tests: vLLM's OpenAI server, a one-node SLURM cluster, engine reuse, two engines side by side, an
# engine on a dummy shape.
test-long: $(STAMP) chromium slurm
	$(if $(SONNET),SPECSWEEP_SONNET=$(abspath $(SONNET)),) $(BIN)/python -m pytest $(PYTEST_ARGS) -m long

# The fast tier, for everyday work (under 2 minutes on 2 cores): every test not marked slow, i.e. none that
# starts Snakemake or vLLM or needs the real model. `make test` runs both tiers, `make test-long` the long tests.
test-fast: $(STAMP)
	SPECSWEEP_SONNET=$(abspath $(SONNET)) $(BIN)/python -m pytest $(PYTEST_ARGS) -m "not slow"

# Debian's shellcheck, for the lint target.
shellcheck:
	@command -v shellcheck >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null; }

# Static checks (versions pinned in pyproject's test extra): Snakemake's linter and formatter, ruff's lint and
# format over the package and the tests, mypy over the package, shellcheck over the scripts.
lint: $(STAMP) shellcheck
	$(BIN)/snakemake --lint --configfile config/smoke.yaml $(SNAKE_CONFIG)
	$(BIN)/snakefmt --check Snakefile workflow/rules
	$(BIN)/ruff check workflow/specsweep workflow/scripts tests
	$(BIN)/ruff format --check workflow/specsweep workflow/scripts tests
	$(BIN)/mypy workflow/specsweep
	shellcheck workflow/scripts/*.sh offline-gpu/*.sh .ci/run

figures: $(STAMP)
	$(BIN)/snakemake --profile profiles/cpu $(SNAKE_CONFIG) figures

clean-demo:
	rm -rf results/smoke figures/smoke logs/smoke benchmarks/smoke
