"""vcrash: log forensics for vLLM inference servers."""

__version__ = "0.1.0"
