"""pytest: the modules that subclass vLLM's interfaces are collected (for their doctests) only where vllm is
installed, i.e. in the scale venv; the main suite runs them there through tests/integrations/test_vllm.py."""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("vllm") else ["backend.py", "logits_processor.py"]
