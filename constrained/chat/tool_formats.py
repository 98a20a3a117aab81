"""The tool-call formats llama-server's autoparser finds in the sdist's chat templates, as data.

llama.cpp renders each template with probe messages and diffs the outputs (``common/chat-diff-analyzer.cpp``) to
find where and how a tool call is written; for the JSON formats here that analysis ends in a handful of values (the
markers, the JSON field names, whether calls sit in an array, the reasoning tags, the generation prompt). Those
values are recorded below per template family, checked against the real llama-server (``tests/chat/test_tools_server.py``,
``scripts/tool_call_sweep.py``) rather than re-derived from a template at run time. ``format_for_template`` picks
one by the template's text, as ``common_chat_templates_apply_jinja`` dispatches on substrings.

Example:
    >>> from constrained.chat.tool_formats import FORMATS, format_for_template
    >>> format_for_template('<|im_start|>{{- "<tool_call>" }} {% if tools %}{% endif %}').name
    'hermes'
    >>> FORMATS["llama3"].args_field, FORMATS["llama3"].parallel_default
    ('parameters', False)
    >>> format_for_template(None) is None
    True
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FORMATS", "ToolFormat", "format_for_template"]


@dataclass(frozen=True)
class ToolFormat:
    """One JSON_NATIVE tool format (``analyze_tools::format`` plus what the generator reads beside it).

    ``until_base`` / ``until_per_tool``: llama.cpp names the ``until`` rule of an eager (``required``) grammar after
    its parser's index in the PEG arena (``common/peg-parser.cpp:1735-1738``), that is the number of parsers built
    before it: a fixed count for the template's reasoning and prefix parsers, a fixed count per tool (the call
    object's literals, spaces, sequences and its schema node; the schema's own size does not count), and 8 more for
    the comma-separated repetition of ``parallel_tool_calls`` (``standard_json_tools``). Measured on the real
    llama-server and checked there for every case of the tests.
    """

    name: str
    per_call_start: str = ""          # a marker around each call (Qwen, Hermes)
    per_call_end: str = ""
    section_start: str = ""           # a marker around all calls (Mistral Nemo)
    section_end: str = ""
    name_field: str = "name"
    args_field: str = "arguments"
    id_field: str = ""                # a call id the model writes (Mistral Nemo: "id")
    array_wrapped: bool = False       # calls inside [ ]
    openai_wrapper: bool = False      # an optional leading "type": "function", (Llama 3.x)
    reasoning: tuple[str, str] | None = None     # (start, end) thinking tags as the template writes them
    reasoning_until_id: int = 0       # the arena id of the reasoning block's until (built first)
    generation_prompt: str = ""
    parallel_default: bool = True     # caps.supports_parallel_tool_calls
    until_base: int = 0
    until_per_tool: int = 0
    templates: tuple[str, ...] = ()   # the sdist's templates proven identical (models/templates/)

    @property
    def trigger(self) -> str:
        """``trigger_marker``: the section start, else the per-call start (empty: no lazy grammar)."""
        return self.section_start or self.per_call_start

    @property
    def tool_start(self) -> str:
        """Where content stops in the parser (``build_tool_parser_json_native``: ``{`` without markers)."""
        return self.section_start or self.per_call_start or "{"

    @property
    def preserved_tokens(self) -> list[str]:
        """Every non-empty marker, trimmed (``chat-diff-analyzer.cpp`` collect_preserved_tokens)."""
        out: list[str] = []
        marks = [*(self.reasoning or ()), self.section_start, self.section_end, self.per_call_start, self.per_call_end]
        for m in marks:
            m = m.strip()
            if m and m not in out:
                out.append(m)
        return out


FORMATS: dict[str, ToolFormat] = {
    f.name: f for f in [
        ToolFormat("hermes", per_call_start="<tool_call>\n", per_call_end="</tool_call>",
                   generation_prompt="<|im_start|>assistant\n", until_base=109, until_per_tool=52,
                   templates=("Qwen-Qwen2.5-7B-Instruct.jinja", "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
                              "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "MiMo-VL.jinja")),
        ToolFormat("qwen3", per_call_start="<tool_call>\n", per_call_end="</tool_call>",
                   reasoning=("<think>\n", "\n</think>\n\n"), reasoning_until_id=13, generation_prompt="<|im_start|>assistant\n",
                   until_base=131, until_per_tool=52, templates=("Qwen-Qwen3-0.6B.jinja",)),
        ToolFormat("llama3", args_field="parameters", openai_wrapper=True,
                   generation_prompt="<|start_header_id|>assistant<|end_header_id|>\n\n", parallel_default=False,
                   until_base=104, until_per_tool=68,
                   templates=("meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja",
                              "meta-llama-Llama-3.3-70B-Instruct.jinja")),
        ToolFormat("mistral_nemo", section_start="[TOOL_CALLS]", id_field="id", array_wrapped=True,
                   until_base=112, until_per_tool=80, templates=("mistralai-Mistral-Nemo-Instruct-2407.jinja",)),
    ]
}


def format_for_template(source: str | None) -> ToolFormat | None:
    """The format llama-server uses for a template's text, or None (a template llama-server cannot give tools to,
    or one whose format is not reproduced here: the caller falls back to our generic format)."""
    src = source or ""
    if not src or "tools" not in src:
        return None
    if "<tool_call>" in src and "<|im_start|>" in src and "<function=" not in src:   # ChatML + JSON blocks
        if "<think>" not in src:
            return FORMATS["hermes"]
        # a generation prompt that opens the thinking block (QwQ, Bielik) changes the parser: not reproduced
        forced = "assistant\\n<think>" in src or "{{- '<think>\\n' }}" in src
        return None if forced else FORMATS["qwen3"]
    if ('Respond in the format {"name": function name' in src and "Do not use variables." in src
            and "<|start_header_id|>" in src):
        return FORMATS["llama3"]          # the autoparser's openai_wrapper_trigger workaround (chat-diff-analyzer.cpp)
    if ("[TOOL_CALLS]" in src and "[AVAILABLE_TOOLS]" in src and "[CALL_ID]" not in src and "[ARGS]" not in src
            and "[SYSTEM_PROMPT]" not in src):
        return FORMATS["mistral_nemo"]
    return None
