"""The modules a runner's interpreter holds for one job.

Each side runs in its own runner process. KernelBench's convention puts ``get_inputs`` and
``get_init_inputs`` in the reference source only, so the candidate's runner also compiles the
reference's source as side "ref" (never launching it), and a side whose source lacks them uses the
other side's, just as the core gives a side without an IOContract the other side's inputs. The
reference's runner holds only the reference.
"""

_modules = {}  # side ("ref" / "custom") -> loaded user module
_default_input_layout = None


def register_module(side, module):
    _modules[side] = module


def find(side, name):
    """``name`` from this side's module, else from the other side's, else None. Returns
    (value, where) with where "own" or the other side's name."""
    own = _modules.get(side)
    if own is not None and callable(getattr(own, name, None)):
        return getattr(own, name), "own"
    for other_side, module in _modules.items():
        if other_side != side and callable(getattr(module, name, None)):
            return getattr(module, name), other_side
    return None, None


def set_default_input_layout(layout):
    """Where get_inputs() put non-tensor values: the core passes only tensors back, so a side
    launched on default inputs gets its scalars re-inserted at these positions."""
    global _default_input_layout
    _default_input_layout = layout


def default_input_layout():
    return _default_input_layout
