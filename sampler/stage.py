"""The interface every stage of the chain has (``llama_sampler_i``: apply, accept, reset, clone), with the defaults
of a stateless stage written once.

A stage applies itself to a :class:`~sampler.candidates.Candidates` array in place, learns the accepted tokens,
resets to its initial state and clones itself (a copy whose later state is its own). A stage without state
(top-k, top-p, min-p, typical, top-n-sigma, temperature, logit bias, infill, a disabled sampler) derives from
:class:`Stage` and writes only ``apply``: accepting and resetting do nothing, and a clone may be the stage itself.
Stages with state (penalties, DRY, dist, mirostat, adaptive-p, XTC's generator) override them.

Example:
    >>> class Halve(Stage):
    ...     name = "halve"
    ...     def apply(self, c):
    ...         c.own()[:] /= 2
    >>> s = Halve(); s.accept(3); s.reset()
    >>> s.clone() is s
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .candidates import Candidates


class Stage(Protocol):
    """One sampler of the chain (``llama_sampler_i``). The bodies are the stateless defaults."""

    name: str

    def apply(self, c: Candidates) -> None:
        """Change ``c`` in place (``llama_sampler_apply``)."""
        raise NotImplementedError

    def accept(self, token: int) -> None:  # noqa: B027 - a stateless stage learns nothing
        """Learn the accepted ``token`` (``llama_sampler_accept``)."""

    def reset(self) -> None:  # noqa: B027 - nothing to reset
        """Back to the initial state (``llama_sampler_reset``)."""

    def clone(self) -> Stage:
        """A copy whose later state is its own (``llama_sampler_clone``): a stateless stage is its own clone."""
        return self
