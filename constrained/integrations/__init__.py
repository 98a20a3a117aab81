"""The engine in other inference stacks, each opt-in and importing its stack only when used.

- :mod:`.constraint`: one sequence under a grammar (:class:`~.constraint.SequenceConstraint`), shared by the others;
- :mod:`.hf`: a transformers ``LogitsProcessor``;
- :mod:`.llama_processor`: a llama-cpp-python ``logits_processor`` for ``Llama.create_completion``;
- :mod:`.vllm`: a vLLM structured-output backend and per-request logits processor.

Example:
    >>> from constrained.integrations.constraint import grammar_from_spec
    >>> grammar_from_spec('root ::= "yes" | "no"').source.strip()
    'root ::= "yes" | "no"'
"""
