"""The llama.cpp oracle harness: llama.cpp's own C code driven from Python, for tests and benchmarks.

- :mod:`oracle.sdist`: the llama.cpp source tree of llama-cpp-python 0.3.36 (fetched once, cached), with its
  tests, grammars and the 19 vocab-only GGUFs.
- :mod:`oracle.llama`: llama.cpp's samplers, grammar sampler and vocabulary through llama-cpp-python's ctypes API.
"""
