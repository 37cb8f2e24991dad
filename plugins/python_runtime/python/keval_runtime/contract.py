"""The parts of an IOContract a driver reads itself. The core has already validated the contract
(field paths in its errors) and materialises the tensors; drivers need only the launch settings
and, to compile Triton kernels before any device exists, each argument's type."""
import json

from . import errors

# The request's dtype names and torch's aliases, as the core accepts them (request/model.cpp).
_DTYPE_NAMES = {
    "float32": "float32", "float": "float32", "float16": "float16", "half": "float16",
    "bfloat16": "bfloat16", "float64": "float64", "double": "float64", "int8": "int8",
    "char": "int8", "int16": "int16", "short": "int16", "int32": "int32", "int": "int32",
    "int64": "int64", "long": "int64", "uint8": "uint8", "byte": "uint8", "bool": "bool",
}


class ArgSpec:
    __slots__ = ("name", "type", "role", "is_meta", "value", "dtype")

    def __init__(self, raw):
        self.name = raw.get("name")
        self.type = raw.get("type", "tensor")
        self.role = raw.get("role", "input")
        self.is_meta = bool(raw.get("is_meta", False))
        self.value = raw.get("value")
        spec = raw.get("tensor_spec") or {}
        dtype = str(spec.get("dtype", "float32"))
        self.dtype = _DTYPE_NAMES.get(dtype.removeprefix("torch."), dtype)


class Contract:
    def __init__(self, raw):
        self.args = [ArgSpec(a) for a in raw.get("args", [])]
        launch = raw.get("launch") or {}
        self.grid = _dims(launch.get("grid"))
        self.num_warps = launch.get("num_warps")
        self.num_stages = launch.get("num_stages")


def _dims(value):
    """A launch dimension as a tuple: {"x": 8, "y": 2} -> (8, 2, 1), [8, 2] -> (8, 2), 8 -> (8,)."""
    if value is None:
        return None
    if isinstance(value, dict):
        return tuple(int(value.get(axis, 1)) for axis in ("x", "y", "z"))
    if isinstance(value, list):
        return tuple(int(v) for v in value)
    return (int(value),)


def parse(io_json):
    """The Contract for the request's `io` JSON text, or None when the request has none."""
    if io_json is None:
        return None
    return Contract(json.loads(io_json))


def parse_metadata(metadata_json):
    metadata = json.loads(metadata_json) if metadata_json else {}
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise errors.RequestError("metadata must be a JSON object")
    return metadata


def metadata_string(metadata, key):
    """metadata[key] as a non-empty string, None when absent or null."""
    value = metadata.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise errors.RequestError(f"metadata.{key} must be a non-empty string")
    return value
