"""Chat: templates as llama-server applies them (``template``); tool calls (``tools``, helper modules ``tool_*``).

>>> from constrained.chat import render
>>> render([{"role": "user", "content": "Hi"}], None)
'<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'
"""

from __future__ import annotations

from .delimiters import message_delimiters
from .template import CHATML_TEMPLATE, ChatTemplateError, ChatTemplates, render

__all__ = ["CHATML_TEMPLATE", "ChatTemplateError", "ChatTemplates", "message_delimiters", "render"]
