# ScaleDL: `make run` (the whole pipeline), `make test`, `make ui`, `make bench`.
# Everything is installed into project-local virtual environments:
#   .venv      ScaleDL, Dagster, torch, torch-geometric, great-expectations, ...
#   .venv-dvc  DVC alone (dvc 3.67 pins antlr4 4.9 through hydra-core, which breaks
#              `dagster asset materialize` with "ord() expected string of length 1" when both
#              share one environment; pip check does not notice).
PYTHON ?= python3
VENV := .venv
DVC_VENV := .venv-dvc
PRESET ?= quick
# Shards of the design's profiling (pipelines/defs/assets/profiling.py, docs/cluster.md).
SHARDS ?= 4
TORCH_CPU := torch==2.13.0
export DAGSTER_HOME := $(CURDIR)/.dagster_home
export SCALEDL_PRESET := $(PRESET)
export SCALEDL_PROFILING_SHARDS := $(SHARDS)
export PYTHONDONTWRITEBYTECODE := 1
# mkdocs 1.6 and mkdocs-material print a banner about their future on every build.
export NO_MKDOCS_2_WARNING := 1
export DISABLE_MKDOCS_2_WARNING := true

.PHONY: setup run test ui bench lint docs clean-data layout-history

$(VENV)/.installed: pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	# No CUDA here: install the CPU wheel first (an unpinned torch pulls a multi-GB CUDA build).
	command -v nvidia-smi >/dev/null 2>&1 || $(VENV)/bin/python -m pip install -q "$(TORCH_CPU)"
	$(VENV)/bin/python -m pip install -q -e ".[dev,docs]"
	touch $@

$(DVC_VENV)/.installed:
	test -x $(DVC_VENV)/bin/python || $(PYTHON) -m venv $(DVC_VENV)
	$(DVC_VENV)/bin/python -m pip install -q --upgrade pip
	$(DVC_VENV)/bin/python -m pip install -q "dvc>=3.50,<4"
	touch $@

setup: $(VENV)/.installed $(DVC_VENV)/.installed
	$(VENV)/bin/python -m pipelines.home >/dev/null

run: setup
	@mkdir -p "$${SCALEDL_DATA_DIR:-data}/reports" && date +%s > "$${SCALEDL_DATA_DIR:-data}/reports/.make_run_started"
	# `job execute` takes a module, not the workspace: the same code location pyproject names.
	# Not `dg launch --job scaledl_pipeline` (which Dagster's deprecation note suggests): `dg`
	# ships in dagster-dg-cli, whose newest release here (1.13.27) pins dagster==1.13.27 and
	# would downgrade dagster 1.13.28 under dagster-webserver 1.13.28 (checked with
	# `pip install --dry-run dagster-dg-cli`); [tool.dg] in pyproject is ready for it.
	# Three jobs, as Dagster runs one partitions definition per job: the design; the
	# profile_design backfill, one run per shard, one after another in one process
	# (pipelines/backfill.py: Dagster, the definitions and torch imported once; the profiling
	# pool allows one shard at a time anyway; every shard is tried, it exits 1 naming the failed
	# ones, which stops the target here, and running them again re-measures only what they
	# lack); the rest (consolidation onwards).
	$(VENV)/bin/dagster job execute -m pipelines.definitions -j design_job
	$(VENV)/bin/python -m pipelines.backfill
	$(VENV)/bin/dagster job execute -m pipelines.definitions -j scaledl_pipeline
	$(VENV)/bin/scaledl summary
	@# The pipeline's wall time (installs excluded), for the README's timings.
	@printf '{"started_unix": %s, "finished_unix": %s}\n' \
		"$$(cat "$${SCALEDL_DATA_DIR:-data}/reports/.make_run_started")" "$$(date +%s)" \
		> "$${SCALEDL_DATA_DIR:-data}/reports/make_run.json"

# Three phases (tests/conftest.py): every test on all cores, except those that bound the seconds a
# stop takes (marked `timed`: run two at a time next) and those that need an idle host (marked
# `serial`: run alone, last); then the documentation site is built strictly (a broken link, page
# or API reference fails it). All four run, and any failing fails the target.
# The later phases collect only the files that mark a test so (collecting all costs ~10 s).
TIMED_TEST_FILES = $(shell grep -rl --include='test_*.py' 'mark\.timed' tests)
SERIAL_TEST_FILES = $(shell grep -rl --include='test_*.py' 'mark\.serial' tests)
test: setup
	$(VENV)/bin/python -m pytest -q -n auto --dist loadgroup --no-loadscope-reorder \
		-m "not serial and not timed" --durations=30; parallel=$$?; \
	$(VENV)/bin/python -m pytest -q -n 2 --dist load -m timed --durations=8 $(TIMED_TEST_FILES); timed=$$?; \
	$(VENV)/bin/python -m pytest -q -m serial $(SERIAL_TEST_FILES); serial=$$?; \
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(VENV)/bin/mkdocs build --strict --quiet; docs=$$?; \
	test $$parallel -eq 0 && test $$timed -eq 0 && test $$serial -eq 0 && test $$docs -eq 0

ui: setup
	$(VENV)/bin/python scripts/ui.py

bench: setup
	$(VENV)/bin/python benchmarks/run_all.py

# The documentation site on http://127.0.0.1:8000 (DOCS_ADDR=host:port to change), rebuilt on edits.
DOCS_ADDR ?= 127.0.0.1:8000
docs: setup
	$(VENV)/bin/mkdocs serve --dev-addr $(DOCS_ADDR)

lint: setup
	$(VENV)/bin/ruff check scaledl pipelines tests benchmarks scripts
	$(VENV)/bin/lint-imports

# The CPU layout profiles that judged intermediate steps of the layout recipe (2026-12-03/04,
# datasets/layouts-cpu/history/README.md) left the working tree in issue 52; this copies them
# from the last commit that held them into the DVC-tracked data folder, which data.dvc versions
# at the pipeline's next `dvc add data`. Needs the git history (not a shallow clone).
LAYOUT_HISTORY_COMMIT := 65e612e33c57f9014006132de0cafb390563e0a3
layout-history:
	@dest="$${SCALEDL_DATA_DIR:-data}/layouts-cpu-history"; mkdir -p "$$dest" && \
	git archive $(LAYOUT_HISTORY_COMMIT) datasets/layouts-cpu/history \
		| tar -x --strip-components=3 -C "$$dest" && echo "$$dest: $$(ls "$$dest" | wc -l) entries"
