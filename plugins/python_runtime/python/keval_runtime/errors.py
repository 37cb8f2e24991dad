"""Errors a driver reports, with the SDK's error codes (keval/plugin.h, keval_error_code)."""
import os
import re
import traceback

COMPILE = 1
RUNTIME = 2
INVALID_REQUEST = 3
UNSUPPORTED = 4
INTERNAL = 5


class KernelError(Exception):
    """An error the C++ layer turns into a keval_error: ``code``, ``message`` (one line, the
    seed's wording where it gives one) and ``details`` (the full traceback or log, or None)."""

    code = RUNTIME

    def __init__(self, message, details=None):
        super().__init__(message)
        self.message = message
        self.details = details


class CompileError(KernelError):
    code = COMPILE


class LaunchError(KernelError):
    code = RUNTIME


class RequestError(KernelError):
    code = INVALID_REQUEST


class UnsupportedError(KernelError):
    code = UNSUPPORTED


_RUNTIME_DIR = os.path.dirname(os.path.abspath(__file__))


# The files loader.load_source writes submitted sources to.
_USER_FILE = re.compile(r"keval_\w+_(ref|custom)_[0-9a-f]{12}\.py$")


def _is_keval_frame(frame):
    name = frame.filename
    return name.startswith(_RUNTIME_DIR) or name.startswith("<frozen importlib")


def user_traceback(exc, _depth=0):
    """The traceback of an exception raised by user code, starting at the first frame in the
    submitted source: the frames above it are keval's (the driver calling in, importlib loading
    the module) or the framework's call machinery (torch's Module.__call__). Every frame from
    there down is kept, torch's and Triton's included. Without a frame in the submitted source,
    only keval's own frames are left out."""
    frames = traceback.extract_tb(exc.__traceback__)
    first = next((i for i, f in enumerate(frames) if _USER_FILE.search(f.filename)), None)
    if first is None:
        first = 0
        while first < len(frames) and _is_keval_frame(frames[first]):
            first += 1
    lines = ["Traceback (most recent call last):\n"] if first < len(frames) else []
    lines += traceback.format_list(frames[first:])
    lines += traceback.format_exception_only(type(exc), exc)
    text = "".join(lines)
    # Chained causes ("During handling of ...") matter for Triton's compile errors.
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    if cause is not None and not isinstance(cause, KernelError) and _depth < 8:
        text = user_traceback(cause, _depth + 1) + "\n\nThe above exception led to:\n\n" + text
    return text.rstrip("\n")


def describe(exc):
    """``TypeName: message`` on one line (the first line of the message)."""
    text = str(exc).strip()
    first_line = text.splitlines()[0] if text else ""
    name = type(exc).__name__
    return f"{name}: {first_line}" if first_line else name


def from_user_code(error_class, summary, exc):
    """A KernelError for an exception raised by the user's code: ``summary: Type: message`` and
    the traceback as details."""
    return error_class(f"{summary}: {describe(exc)}", user_traceback(exc))
