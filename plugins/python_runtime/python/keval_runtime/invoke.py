"""Calling a Python target (a torch function or method, a multi_kernel entry point) with launch
arguments, and collecting the tensors it returns.

How arguments map to the call:
  - the side's own IOContract: its input and inout tensors and non-meta scalars positionally, in
    contract order; meta arguments as keywords (output-role tensors are not passed: the target
    returns its outputs);
  - another side's IOContract (a torch reference compared against a Triton or CUDA kernel): its
    input tensors positionally; its scalars only where the target has a parameter of that name,
    as keywords (n_elements or BLOCK_SIZE belong to the other kernel's launch, not to forward);
  - no IOContract anywhere: get_inputs()'s values, tensors from the core and non-tensors as
    get_inputs() returned them.
"""
import inspect

from . import bridge, errors, session


class CallPlan:
    """How one side calls its target; decided at compile time from what the side has."""

    def __init__(self, target, label, own_contract):
        self.target = target
        self.label = label  # "Model.forward", "entry point 'run'"
        self.own_contract = own_contract
        self._parameter_names = None

    def parameter_names(self):
        if self._parameter_names is None:
            try:
                params = inspect.signature(self.target).parameters.values()
                self._parameter_names = {p.name for p in params
                                         if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
            except (TypeError, ValueError):  # builtins without a signature
                self._parameter_names = set()
        return self._parameter_names

    def arguments(self, args):
        """(positional, keywords) for one launch."""
        if self.own_contract:
            positional = [a.value for a in args if not a.is_meta and a.role != bridge.ROLE_OUTPUT]
            keywords = {a.name: a.value for a in args if a.is_meta}
            return positional, keywords
        layout = session.default_input_layout()
        if layout is not None:
            return _from_layout(layout, args), {}
        positional = [a.value for a in args if a.is_tensor and a.role != bridge.ROLE_OUTPUT]
        names = self.parameter_names()
        keywords = {a.name: a.value for a in args
                    if not a.is_tensor and not a.is_meta and a.name in names}
        return positional, keywords


def _from_layout(layout, args):
    tensors = [a.value for a in args if a.is_tensor]
    if len(tensors) != sum(1 for kind, _ in layout if kind == "tensor"):
        raise RuntimeError(f"get_inputs() produced {len(layout)} values but the core passed "
                           f"{len(tensors)} tensors")
    values = []
    it = iter(tensors)
    for kind, value in layout:
        values.append(next(it) if kind == "tensor" else value)
    return values


def call(plan, args, no_grad):
    """Runs the target once; returns the tensors it produced. User exceptions become
    LaunchError with the traceback."""
    import torch

    positional, keywords = plan.arguments(args)
    try:
        if no_grad:
            with torch.no_grad():
                result = plan.target(*positional, **keywords)
        else:
            result = plan.target(*positional, **keywords)
    except Exception as exc:
        raise errors.from_user_code(errors.LaunchError, f"{plan.label} raised", exc) from None
    return _outputs(result, args, plan.label)


def _outputs(result, args, label):
    import torch

    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        for index, value in enumerate(result):
            if not isinstance(value, torch.Tensor):
                raise errors.LaunchError(f"{label} returned a {type(result).__name__} whose "
                                         f"item {index} is a {type(value).__name__}; keval "
                                         "compares tensors only")
        if not result:
            raise errors.LaunchError(f"{label} returned an empty {type(result).__name__}")
        return list(result)
    if result is None:
        inout = [a.value for a in args if a.is_tensor and a.role == bridge.ROLE_INOUT]
        if inout:
            return inout  # updated in place: the inout arguments are the outputs
        raise errors.LaunchError(f"{label} returned None; it must return its output tensor(s)")
    raise errors.LaunchError(f"{label} returned a {type(result).__name__}; it must return a "
                             "tensor or a tuple of tensors")
