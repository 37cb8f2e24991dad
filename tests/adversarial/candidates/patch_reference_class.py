# Attack: modify the reference. Finds the reference's Model class through sys.modules and the
# callers' frames (module globals) and replaces its forward with one that returns zeros, then
# returns zeros itself. If the reference's class were reachable, both sides would agree on zeros
# and the job would be reported correct; otherwise zeros are wrong (ReLU of random values).
import sys

import torch
import torch.nn as nn


def zeros_forward(self, *args, **kwargs):
    return torch.zeros_like(args[0])


def patch_model_class(namespace):
    try:
        cls = namespace.get("Model")
    except Exception:
        return 0
    if isinstance(cls, type) and issubclass(cls, nn.Module) and cls.forward is not zeros_forward:
        cls.forward = zeros_forward
        return 1
    return 0


def patch_reference():
    patched = 0
    for name, module in list(sys.modules.items()):
        if module is None or name == __name__:
            continue
        try:
            namespace = vars(module)
        except TypeError:
            continue
        patched += patch_model_class(namespace)
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") != __name__:
            patched += patch_model_class(frame.f_globals)
        frame = frame.f_back
    return patched


patch_reference()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        patch_reference()
        return torch.zeros_like(x)
