"""Python tools for keval, the GPU kernel evaluator.

Standard library only. ``keval.compute_eval`` evaluates ComputeEval datapacks through a keval
daemon (``python -m keval.compute_eval --help``). A general client of keval's HTTP API is to
come; ``keval._daemon`` is the small private transport that ``compute_eval`` uses meanwhile.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
