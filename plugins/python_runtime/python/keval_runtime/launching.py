"""One launch on the core's stream, including the case where the core is capturing it into a
CUDA graph.

The CUDA engine first tries to capture a launch (replaying the graph removes Python's launch
overhead from the samples) and times it with events when capture fails. A capture started by
the core is not one torch knows about: torch raises when, during it, the caching allocator needs
fresh device memory, an operation synchronises (``.item()``, ``nonzero``, boolean indexing) or
the CUDA generator draws random numbers. Such a launch makes the capture fail on purpose and
returns nothing, so the core falls back to events. The same launch has already succeeded during
validation on the same inputs, so a failure during capture is the capture's; a launch that also
fails outside capture fails again in the first timed sample and is reported there.

A launch can also fail during capture without raising: KernelBench's load_inline kernels launch
with a bare ``<<<grid, block>>>`` on the legacy default stream, which a capture of the core's
stream forbids, and their wrappers do not check the launch. The graph would then replay without
that kernel (a time for work not done), and the error left pending would be raised by the next
torch call in the first timed sample. So a pending CUDA error after a captured launch also
abandons the capture, and is cleared: the launch is timed with events, where it is legal.
"""
from . import errors


def run(device, launch):
    """Runs ``launch()`` (which returns exported outputs) on the core's stream."""
    with device.on_stream():
        if device.capturing():
            raised = False
            try:
                outputs = launch()
            except errors.KernelError:
                raised = True
            # Taken (and so cleared) either way: the event-timed launch must not inherit it.
            if device.take_pending_cuda_error() is not None or raised:
                device.abandon_capture()
                return []
            return outputs
        return launch()
