"""Putting KernelBench's bare kernel launches on torch's current stream.

KernelBench's load_inline kernels launch with ``kernel<<<grid, block>>>(...)`` (or with shared
memory and no stream): on the legacy default stream. keval times both sides of a compare by
capturing one launch into a CUDA graph on torch's current stream and replaying it; a launch on
the legacy stream cannot be captured (it invalidates the capture), so such a candidate used to
be timed with events while its torch reference was replayed from a graph: not the same protocol,
and every small problem paid launch overhead its reference was spared (issue 13).

keval builds these extensions itself, so it gives those launches torch's current stream: the
stream every torch operation of the same ``forward`` runs on, which is what a single-stream
author means. A per-thread default stream (``nvcc --default-stream per-thread``) would not do:
a launch there, during a capture on another stream, is not captured; it runs once, at capture,
and the graph replays without it. Launches that name a stream are left as they are.
"""

STREAM_MACRO = "KEVAL_CURRENT_STREAM()"

# Inserted into a unit whose launches were rewritten, after the prelude: c10's stream header
# alone (no operator declarations), so the lean header set still applies.
STREAM_PRELUDE = ("#include <c10/cuda/CUDAStream.h>\n"
                  "#define KEVAL_CURRENT_STREAM() "
                  "(static_cast<cudaStream_t>(c10::cuda::getCurrentCUDAStream()))\n")

_OPEN = {"(": ")", "[": "]", "{": "}"}


def _skip_literal_or_comment(text, i):
    """The index after a comment or a string/char literal starting at i, or i when none does."""
    if text.startswith("//", i):
        end = text.find("\n", i)
        return len(text) if end < 0 else end
    if text.startswith("/*", i):
        end = text.find("*/", i + 2)
        return len(text) if end < 0 else end + 2
    if text[i] in "\"'":
        quote, j = text[i], i + 1
        while j < len(text) and text[j] != quote and text[j] != "\n":
            j += 2 if text[j] == "\\" else 1
        return min(j + 1, len(text))
    return i


def _launch_arguments(text, start):
    """For the launch configuration opening at ``start`` (just after "<<<"): the index of its
    closing ">>>" and the top-level comma positions, or None when it does not parse (unbalanced
    brackets, no closing ">>>")."""
    stack, commas, i = [], [], start
    while i < len(text):
        after = _skip_literal_or_comment(text, i)
        if after != i:
            i = after
            continue
        c = text[i]
        if not stack and text.startswith(">>>", i):
            return i, commas
        if c in _OPEN:
            stack.append(_OPEN[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                return None
        elif c == "," and not stack:
            commas.append(i)
        elif c == ";" and not stack:
            return None  # a statement ended: this "<<<" was not a launch
        i += 1
    return None


def put_launches_on_current_stream(text):
    """Returns (text, launches rewritten). ``<<<g, b>>>`` becomes ``<<<g, b, 0, S>>>`` and
    ``<<<g, b, m>>>`` becomes ``<<<g, b, m, S>>>``, S being torch's current stream; launches with
    a stream, and text in comments or literals, are left alone."""
    out, i, rewritten = [], 0, 0
    while i < len(text):
        after = _skip_literal_or_comment(text, i)
        if after != i:
            out.append(text[i:after])
            i = after
            continue
        if not text.startswith("<<<", i):
            out.append(text[i])
            i += 1
            continue
        parsed = _launch_arguments(text, i + 3)
        if parsed is None:
            out.append("<<<")
            i += 3
            continue
        close, commas = parsed
        config = text[i + 3:close]
        if len(commas) == 1:
            config += ", 0, " + STREAM_MACRO
            rewritten += 1
        elif len(commas) == 2:
            config += ", " + STREAM_MACRO
            rewritten += 1
        out.append("<<<" + config + ">>>")
        i = close + 3
    return "".join(out), rewritten
