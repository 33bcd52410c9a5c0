"""specsweep: a reproducible sweep of vLLM's built-in speculative decoding."""

__version__ = "0.1.0"
