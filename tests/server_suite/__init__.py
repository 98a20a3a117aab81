"""Running llama-server's own pytest suite (and our tests) against ``constrained serve``."""
