"""Python tools for keval, the GPU kernel evaluator.

Standard library only. ``keval.Client`` (and ``keval.AsyncClient``) talk to a keval daemon
(``keval serve``) over its Unix socket or authenticated TCP and return typed results;
``keval.iocontract`` builds IOContracts with the V2 server's helper names; ``keval.compute_eval``
evaluates ComputeEval datapacks through a daemon (``python -m keval.compute_eval --help``).
"""

from .client import (AsyncClient, Client, DaemonUnavailable, JobTimeout, KevalError,
                     KevalHTTPError)
from .iocontract import IOContract, IOContractBuilder
from .results import ErrorInfo, EvalResult, Flag, Health, Job, RuntimeStats

__version__ = "0.1.0"
__all__ = [
    "AsyncClient",
    "Client",
    "DaemonUnavailable",
    "ErrorInfo",
    "EvalResult",
    "Flag",
    "Health",
    "IOContract",
    "IOContractBuilder",
    "Job",
    "JobTimeout",
    "KevalError",
    "KevalHTTPError",
    "RuntimeStats",
    "__version__",
]
