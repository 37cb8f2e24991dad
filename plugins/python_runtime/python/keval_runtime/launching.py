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
"""
from . import errors


def run(device, launch):
    """Runs ``launch()`` (which returns exported outputs) on the core's stream."""
    with device.on_stream():
        if device.capturing():
            try:
                return launch()
            except errors.KernelError:
                device.abandon_capture()
                return []
        return launch()
