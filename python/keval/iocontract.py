"""IOContract builders: the V2 server's ``io_contract/spec_builders.py``, standard library only.

The names and semantics are the seed server's, so code written for it ports by changing one
import::

    from keval.iocontract import IOContractBuilder, create_randn_spec, LaunchConfig, LaunchDim

    contract = (IOContractBuilder()
                .add_input_tensor("x", create_randn_spec([1024], seed=42))
                .add_output_tensor("y", shape=[1024], dtype="float32")
                .add_scalar("n_elements", "int", 1024)
                .add_meta_param("BLOCK_SIZE", value=256)
                .set_launch_config(LaunchConfig(grid=LaunchDim(x=4), num_warps=4))
                .build())
    request = {"kernel": {"source_code": src, "kernel_type": "triton", "io": contract.to_dict()}}

The seed's pydantic models (``TensorSpec``, ``TensorInit``, ``TensorData``, ``ArgSpec``,
``LaunchDim``, ``LaunchConfig``, ``IOContract``) are dataclasses here with ``to_dict()`` /
``from_dict()``. Arguments are checked when given, with the rules keval's request parser
applies, and a ``ValueError``/``TypeError`` names the argument at fault: a mistake surfaces at
the line that made it, not as a 400 later. keval's additions: ``create_data_spec`` (inline tensor
bytes, base64, optionally zlib), ``launch.shared_mem_bytes``, and the launch/meta conveniences
noted on each method.
"""

from __future__ import annotations

import array
import base64
import json
import math
import struct
import sys
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

__all__ = [
    "ArgSpec", "IOContract", "IOContractBuilder", "LaunchConfig", "LaunchDim", "TensorData",
    "TensorInit", "TensorSpec", "create_arange_spec", "create_data_spec", "create_full_spec",
    "create_ones_spec", "create_randn_spec", "create_uniform_spec", "create_zeros_spec",
    "load_from_file", "save_to_file", "to_json",
]

# keval's request parser's limits (core/request/parse.hpp), checked here so a built contract is
# one the daemon accepts.
MAX_NDIM = 8
MAX_LAUNCH_DIM = (1 << 31) - 1
MAX_NUM_WARPS = 64
MAX_ARG_NAME_BYTES = 256
MAX_STR_ARG_BYTES = 64 * 1024

# Bytes per element, under the canonical names; torch's aliases map onto them.
_DTYPE_SIZES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "int16": 2,
                "int32": 4, "int64": 8, "uint8": 1, "bool": 1}
_DTYPE_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "char": "int8",
                  "short": "int16", "int": "int32", "long": "int64", "byte": "uint8"}
# struct formats for packing Python numbers (bfloat16 is packed by hand).
_STRUCT_FORMATS = {"float32": "f", "float16": "e", "float64": "d", "int8": "b", "int16": "h",
                   "int32": "i", "int64": "q", "uint8": "B", "bool": "?"}
# numpy's / array.array's names of the same types, to tell an array's dtype.
_NUMPY_NAMES = {"float32": "float32", "float16": "float16", "float64": "float64",
                "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
                "uint8": "uint8", "bool": "bool", "bfloat16": "bfloat16"}

INIT_KINDS = ("randn", "uniform", "zeros", "ones", "full", "arange")
ARG_TYPES = ("tensor", "int", "float", "bool", "str")
ROLES = ("input", "output", "inout")


# -- checks --------------------------------------------------------------------------------------

def _canonical_dtype(dtype: Any, what: str = "dtype") -> str:
    """The canonical name of a dtype given as keval accepts it ("float", "torch.half", ...)."""
    name = dtype if isinstance(dtype, str) else str(dtype)  # torch.float32 / np.dtype stringify
    if not isinstance(dtype, str) and not name.startswith("torch."):
        name = getattr(dtype, "name", name)
    base = name[len("torch."):] if name.startswith("torch.") else name
    base = _DTYPE_ALIASES.get(base, base)
    if base not in _DTYPE_SIZES:
        raise ValueError(f"{what}: unsupported dtype {dtype!r}; accepted: "
                         f"{', '.join(_DTYPE_SIZES)} (and torch's aliases "
                         f"{', '.join(_DTYPE_ALIASES)}, each also with a 'torch.' prefix)")
    return base


def _check_dtype(dtype: Any, what: str = "dtype") -> str:
    _canonical_dtype(dtype, what)
    # Kept as given (a torch alias stays an alias): the request says what the user wrote.
    return dtype if isinstance(dtype, str) else _canonical_dtype(dtype, what)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_shape(shape: Any, what: str = "shape") -> List[int]:
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        if _is_int(shape):  # create_zeros_spec(1024): one dimension, as torch.zeros(1024)
            shape = [shape]
        else:
            raise TypeError(f"{what}: want a list of positive integers, got {shape!r}")
    out = list(shape)
    if not out:
        raise ValueError(f"{what}: must have at least one dimension (a scalar is an int/float "
                         f"argument, or shape [1])")
    if len(out) > MAX_NDIM:
        raise ValueError(f"{what}: has {len(out)} dimensions, more than the limit of {MAX_NDIM}")
    for i, extent in enumerate(out):
        if not _is_int(extent) or extent < 1:
            raise ValueError(f"{what}[{i}]: must be an integer >= 1, got {extent!r}")
    return out


def _check_number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what}: want a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{what}: must be a finite number, got {value!r}")
    return value


def _check_seed(seed: Any, what: str = "seed") -> Optional[int]:
    if seed is None:
        return None
    if not _is_int(seed) or not 0 <= seed < (1 << 64):
        raise ValueError(f"{what}: want an integer from 0 to 2**64-1, got {seed!r}")
    return seed


def _check_name(name: Any, what: str = "name") -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what}: want a non-empty string, got {name!r}")
    if "\0" in name or len(name.encode("utf-8")) > MAX_ARG_NAME_BYTES:
        raise ValueError(f"{what}: {name!r} must be at most {MAX_ARG_NAME_BYTES} bytes, "
                         f"without a NUL")
    return name


def _check_scalar(type_: str, value: Any, what: str) -> Any:
    if type_ == "int":
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if not _is_int(value):
            raise TypeError(f"{what}: an int argument wants an integer, got {value!r}")
        if not -(1 << 63) <= value < (1 << 64):
            raise ValueError(f"{what}: {value} does not fit 64 bits")
    elif type_ == "float":
        _check_number(value, what)
    elif type_ == "bool":
        if not isinstance(value, bool):
            raise TypeError(f"{what}: a bool argument wants True or False, got {value!r}")
    elif type_ == "str":
        if not isinstance(value, str):
            raise TypeError(f"{what}: a str argument wants a string, got {value!r}")
        if "\0" in value or len(value.encode("utf-8")) > MAX_STR_ARG_BYTES:
            raise ValueError(f"{what}: must be at most {MAX_STR_ARG_BYTES} bytes, without a NUL")
    return value


def _drop_none(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _want_mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{what}: want an object, got {type(value).__name__}")
    return value


# -- the model -----------------------------------------------------------------------------------

@dataclass
class TensorInit:
    """How the evaluator generates a tensor: ``kind`` and that kind's parameters.

    randn (``mean``, ``std``, ``seed``), uniform (``low``, ``high``, ``seed``), zeros, ones,
    full (``fill_value``), arange (``start``, ``step``). Unset parameters take keval's
    defaults (mean 0, std 1, low 0, high 1, start 0, step 1).
    """

    kind: str
    seed: Optional[int] = None
    mean: Optional[float] = None
    std: Optional[float] = None
    low: Optional[float] = None
    high: Optional[float] = None
    fill_value: Optional[float] = None
    start: Optional[float] = None
    step: Optional[float] = None

    _PARAMETERS = {"randn": ("seed", "mean", "std"), "uniform": ("seed", "low", "high"),
                   "zeros": (), "ones": (), "full": ("fill_value",), "arange": ("start", "step")}

    def __post_init__(self) -> None:
        if self.kind not in INIT_KINDS:
            raise ValueError(f"kind: unknown init kind {self.kind!r}; accepted: "
                             f"{', '.join(INIT_KINDS)}")
        _check_seed(self.seed)
        for key in ("mean", "std", "low", "high", "fill_value", "start", "step"):
            value = getattr(self, key)
            if value is not None:
                _check_number(value, key)
                if key not in self._PARAMETERS[self.kind]:
                    # keval would ignore it with a warning; here it is certainly a mistake.
                    raise ValueError(f"{key}: not used by init kind {self.kind!r}")
        if self.seed is not None and "seed" not in self._PARAMETERS[self.kind]:
            raise ValueError(f"seed: not used by init kind {self.kind!r} (it is deterministic)")
        if self.kind == "full" and self.fill_value is None:
            raise ValueError("fill_value: required for init kind 'full'")
        if self.kind == "randn" and self.std is not None and self.std < 0:
            raise ValueError(f"std: must be >= 0, got {self.std!r}")
        if self.kind == "uniform":
            low = 0.0 if self.low is None else self.low
            high = 1.0 if self.high is None else self.high
            if not low < high:
                raise ValueError(f"low ({low!r}) must be less than high ({high!r})")
        if self.kind == "arange" and self.step is not None and self.step == 0:
            raise ValueError("step: must not be 0")

    def to_dict(self) -> Dict[str, Any]:
        return _drop_none({"kind": self.kind, "seed": self.seed, "mean": self.mean,
                           "std": self.std, "low": self.low, "high": self.high,
                           "fill_value": self.fill_value, "start": self.start,
                           "step": self.step})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TensorInit":
        d = _want_mapping(d, "init")
        kind = d.get("kind")
        # A file written by the seed server's pydantic models lists every parameter (nulls and
        # defaults included) whatever the kind; keval ignores those the kind does not use, and so
        # does loading. Building one by hand with such a parameter is refused (a mistake).
        used = cls._PARAMETERS.get(kind, ("seed", "mean", "std", "low", "high", "fill_value",
                                          "start", "step"))
        return cls(kind=kind, **{k: d[k] for k in used if d.get(k) is not None})


@dataclass
class TensorData:
    """A tensor's bytes, given by the client: base64 in ``data_b64``, zlib-compressed when
    ``compress == "zlib"``; ``shape`` and ``dtype`` may repeat the tensor's (then they must
    agree). Inputs given as data stay as given in every trial (keval cannot renew them)."""

    data_b64: str
    compress: Optional[str] = None
    shape: Optional[List[int]] = None
    dtype: Optional[str] = None

    def __post_init__(self) -> None:
        if not isinstance(self.data_b64, str):
            raise TypeError(f"data_b64: want a base64 string, got {type(self.data_b64).__name__}")
        if self.compress not in (None, "zlib", "none"):
            raise ValueError(f"compress: want 'zlib' or None, got {self.compress!r}")
        if self.shape is not None:
            self.shape = _check_shape(self.shape, "data.shape")
        if self.dtype is not None:
            self.dtype = _check_dtype(self.dtype, "data.dtype")

    def decode(self) -> bytes:
        """The raw bytes (inflated when compressed)."""
        raw = base64.b64decode(self.data_b64, validate=True)
        return zlib.decompress(raw) if self.compress == "zlib" else raw

    def to_dict(self) -> Dict[str, Any]:
        return _drop_none({"data_b64": self.data_b64, "compress": self.compress,
                           "shape": self.shape, "dtype": self.dtype})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TensorData":
        d = _want_mapping(d, "data")
        if "data_b64" not in d:
            raise ValueError("data.data_b64: required")
        return cls(data_b64=d["data_b64"], compress=d.get("compress"), shape=d.get("shape"),
                   dtype=d.get("dtype"))


@dataclass
class TensorSpec:
    """A tensor argument: ``shape``, ``dtype`` (PyTorch's names; ``float32`` by default) and
    either ``init`` (generated by the evaluator) or ``data`` (given). An input with neither is
    generated as ``randn`` (mean 0, std 1); an output needs neither."""

    shape: List[int]
    dtype: str = "float32"
    init: Optional[TensorInit] = None
    data: Optional[TensorData] = None

    def __post_init__(self) -> None:
        self.shape = _check_shape(self.shape)
        self.dtype = _check_dtype(self.dtype)
        if isinstance(self.init, Mapping):
            self.init = TensorInit.from_dict(self.init)
        if isinstance(self.data, Mapping):
            self.data = TensorData.from_dict(self.data)
        if self.init is not None and self.data is not None:
            raise ValueError("init and data are mutually exclusive: give one of them")
        if self.data is not None:
            if self.data.shape is not None and self.data.shape != self.shape:
                raise ValueError(f"data.shape {self.data.shape} differs from shape {self.shape}")
            if self.data.dtype is not None and \
                    _canonical_dtype(self.data.dtype) != _canonical_dtype(self.dtype):
                raise ValueError(f"data.dtype {self.data.dtype!r} differs from dtype "
                                 f"{self.dtype!r}")

    @property
    def numel(self) -> int:
        n = 1
        for extent in self.shape:
            n *= extent
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * _DTYPE_SIZES[_canonical_dtype(self.dtype)]

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"shape": list(self.shape), "dtype": self.dtype}
        if self.init is not None:
            d["init"] = self.init.to_dict()
        if self.data is not None:
            d["data"] = self.data.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TensorSpec":
        d = _want_mapping(d, "tensor_spec")
        if "shape" not in d:
            raise ValueError("tensor_spec.shape: required")
        return cls(shape=d["shape"], dtype=d.get("dtype", "float32"),
                   init=TensorInit.from_dict(d["init"]) if d.get("init") is not None else None,
                   data=TensorData.from_dict(d["data"]) if d.get("data") is not None else None)


@dataclass
class ArgSpec:
    """One kernel argument, in call order: a tensor (``tensor_spec``, ``role`` input, output or
    inout) or a scalar (``value``; ``is_meta`` for a Triton ``tl.constexpr``, passed by keyword).
    """

    name: str
    type: str
    value: Any = None
    tensor_spec: Optional[TensorSpec] = None
    role: str = "input"
    is_meta: bool = False

    def __post_init__(self) -> None:
        _check_name(self.name)
        what = f"argument {self.name!r}"
        if self.type not in ARG_TYPES:
            raise ValueError(f"{what}: type: unknown type {self.type!r}; accepted: "
                             f"{', '.join(ARG_TYPES)}")
        if self.role not in ROLES:
            raise ValueError(f"{what}: role: unknown role {self.role!r}; accepted: "
                             f"{', '.join(ROLES)}")
        if not isinstance(self.is_meta, bool):
            raise TypeError(f"{what}: is_meta: want True or False, got {self.is_meta!r}")
        if isinstance(self.tensor_spec, Mapping):
            self.tensor_spec = TensorSpec.from_dict(self.tensor_spec)
        if self.type == "tensor":
            if self.is_meta:
                raise ValueError(f"{what}: only scalar arguments can be meta parameters")
            if not isinstance(self.tensor_spec, TensorSpec):
                raise ValueError(f"{what}: tensor_spec: required for a tensor argument")
            if self.value is not None:
                raise ValueError(f"{what}: value: a tensor argument takes a tensor_spec instead")
            if self.role == "output" and (self.tensor_spec.init or self.tensor_spec.data):
                # keval would drop them with a warning: the kernel writes an output.
                raise ValueError(f"{what}: an output tensor takes no init or data (the kernel "
                                 f"writes it); use role 'inout' for a tensor it reads too")
        else:
            if self.tensor_spec is not None:
                raise ValueError(f"{what}: tensor_spec: only tensor arguments take one")
            if self.role != "input":
                raise ValueError(f"{what}: role: only tensor arguments can be output or inout")
            if self.value is None:
                raise ValueError(f"{what}: value: required for a scalar argument "
                                 f"(type {self.type})")
            self.value = _check_scalar(self.type, self.value, f"{what}: value")

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"name": self.name, "type": self.type}
        if self.type == "tensor":
            assert self.tensor_spec is not None
            d["tensor_spec"] = self.tensor_spec.to_dict()
            d["role"] = self.role
        else:
            d["value"] = self.value
            if self.is_meta:
                d["is_meta"] = True
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ArgSpec":
        d = _want_mapping(d, "arg")
        for key in ("name", "type"):
            if key not in d:
                raise ValueError(f"arg.{key}: required")
        spec = d.get("tensor_spec")
        return cls(name=d["name"], type=d["type"], value=d.get("value"),
                   tensor_spec=TensorSpec.from_dict(spec) if spec is not None else None,
                   role=d.get("role", "input"), is_meta=d.get("is_meta", False))


@dataclass
class LaunchDim:
    """Grid or block extents; unset ones are 1."""

    x: int = 1
    y: int = 1
    z: int = 1

    def __post_init__(self) -> None:
        for axis in ("x", "y", "z"):
            value = getattr(self, axis)
            if not _is_int(value) or not 1 <= value <= MAX_LAUNCH_DIM:
                raise ValueError(f"{axis}: must be an integer from 1 to {MAX_LAUNCH_DIM}, "
                                 f"got {value!r}")

    def to_dict(self) -> Dict[str, int]:
        return {"x": self.x, "y": self.y, "z": self.z}

    @classmethod
    def of(cls, value: Any, what: str = "grid") -> "LaunchDim":
        """A LaunchDim from one: an int (x), a tuple/list of 1 to 3 ints (Python's grid
        tuples), a dict {x, y, z}, or a LaunchDim."""
        if isinstance(value, LaunchDim):
            return value
        try:
            if _is_int(value):
                return cls(x=value)
            if isinstance(value, Mapping):
                extra = set(value) - {"x", "y", "z"}
                if extra:
                    raise ValueError(f"unknown keys {sorted(extra)}; want x, y, z")
                return cls(**value)
            if isinstance(value, (list, tuple)) and 1 <= len(value) <= 3:
                return cls(*value)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{what}: {e}") from None
        raise ValueError(f"{what}: want an int, a tuple of 1 to 3 ints, {{x, y, z}} or a "
                         f"LaunchDim, got {value!r}")

    @classmethod
    def from_dict(cls, d: Any) -> "LaunchDim":
        return cls.of(d)


@dataclass
class LaunchConfig:
    """How to launch: ``grid`` and ``block`` (CUDA), ``num_warps`` and ``num_stages`` (Triton),
    ``shared_mem_bytes`` (keval: dynamic shared memory, CUDA). ``grid``/``block`` also take an
    int or a tuple, as ``LaunchDim.of``."""

    grid: Optional[LaunchDim] = None
    block: Optional[LaunchDim] = None
    num_warps: Optional[int] = None
    num_stages: Optional[int] = None
    shared_mem_bytes: Optional[int] = None

    def __post_init__(self) -> None:
        if self.grid is not None:
            self.grid = LaunchDim.of(self.grid, "grid")
        if self.block is not None:
            self.block = LaunchDim.of(self.block, "block")
        w = self.num_warps
        if w is not None and (not _is_int(w) or w < 1 or w > MAX_NUM_WARPS or w & (w - 1)):
            raise ValueError(f"num_warps: must be a power of two from 1 to {MAX_NUM_WARPS}, "
                             f"got {w!r}")
        if self.num_stages is not None and (not _is_int(self.num_stages)
                                            or self.num_stages < 1):
            raise ValueError(f"num_stages: must be an integer >= 1, got {self.num_stages!r}")
        if self.shared_mem_bytes is not None and (not _is_int(self.shared_mem_bytes)
                                                  or self.shared_mem_bytes < 0):
            raise ValueError(f"shared_mem_bytes: must be an integer >= 0, got "
                             f"{self.shared_mem_bytes!r}")

    def to_dict(self) -> Dict[str, Any]:
        return _drop_none({"grid": self.grid.to_dict() if self.grid else None,
                           "block": self.block.to_dict() if self.block else None,
                           "num_warps": self.num_warps, "num_stages": self.num_stages,
                           "shared_mem_bytes": self.shared_mem_bytes})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LaunchConfig":
        d = _want_mapping(d, "launch")
        return cls(grid=d.get("grid"), block=d.get("block"), num_warps=d.get("num_warps"),
                   num_stages=d.get("num_stages"), shared_mem_bytes=d.get("shared_mem_bytes"))


@dataclass
class IOContract:
    """A kernel's arguments in call order, and how to launch it: a request's ``io``."""

    args: List[ArgSpec] = field(default_factory=list)
    launch: Optional[LaunchConfig] = None

    def __post_init__(self) -> None:
        self.args = [ArgSpec.from_dict(a) if isinstance(a, Mapping) else a for a in self.args]
        seen: Dict[str, int] = {}
        for i, arg in enumerate(self.args):
            if not isinstance(arg, ArgSpec):
                raise TypeError(f"args[{i}]: want an ArgSpec, got {type(arg).__name__}")
            if arg.name in seen:
                raise ValueError(f"args[{i}]: duplicate name {arg.name!r}, already used by "
                                 f"args[{seen[arg.name]}]")
            seen[arg.name] = i
        if isinstance(self.launch, Mapping):
            self.launch = LaunchConfig.from_dict(self.launch)

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"args": [a.to_dict() for a in self.args]}
        if self.launch is not None:
            d["launch"] = self.launch.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "IOContract":
        d = _want_mapping(d, "io")
        if "args" not in d:
            raise ValueError("io.args: required")
        launch = d.get("launch")
        return cls(args=[ArgSpec.from_dict(a) for a in d["args"]],
                   launch=LaunchConfig.from_dict(launch) if launch is not None else None)


# -- tensor spec helpers (the seed's names and defaults) ------------------------------------------

def create_randn_spec(shape: Sequence[int], dtype: str = "float32", seed: Optional[int] = None,
                      mean: float = 0.0, std: float = 1.0) -> TensorSpec:
    """Normal distribution (``mean``, ``std``); ``seed`` picks the stream (two tensors with one
    seed get the same values). Without it keval derives one from the job's seed."""
    return TensorSpec(shape=shape, dtype=dtype,
                      init=TensorInit(kind="randn", seed=seed, mean=mean, std=std))


def create_uniform_spec(shape: Sequence[int], dtype: str = "float32", seed: Optional[int] = None,
                        low: float = 0.0, high: float = 1.0) -> TensorSpec:
    """Uniform distribution on [low, high)."""
    return TensorSpec(shape=shape, dtype=dtype,
                      init=TensorInit(kind="uniform", seed=seed, low=low, high=high))


def create_zeros_spec(shape: Sequence[int], dtype: str = "float32") -> TensorSpec:
    """All zeros."""
    return TensorSpec(shape=shape, dtype=dtype, init=TensorInit(kind="zeros"))


def create_ones_spec(shape: Sequence[int], dtype: str = "float32") -> TensorSpec:
    """All ones."""
    return TensorSpec(shape=shape, dtype=dtype, init=TensorInit(kind="ones"))


def create_full_spec(shape: Sequence[int], fill_value: float,
                     dtype: str = "float32") -> TensorSpec:
    """Every element ``fill_value``."""
    return TensorSpec(shape=shape, dtype=dtype, init=TensorInit(kind="full", fill_value=fill_value))


def create_arange_spec(shape: Sequence[int], dtype: str = "float32", start: float = 0.0,
                       step: float = 1.0) -> TensorSpec:
    """``start, start + step, ...`` in row-major order."""
    return TensorSpec(shape=shape, dtype=dtype,
                      init=TensorInit(kind="arange", start=start, step=step))


def _bfloat16_bytes(values: Sequence[float]) -> bytes:
    # float32 rounded to nearest-even in its top 16 bits, as torch converts.
    out = bytearray()
    for v in values:
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        if math.isnan(v):
            half = 0x7FC0
        else:
            half = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
        out += struct.pack("<H", half)
    return bytes(out)


def _flatten(values: Any, what: str) -> List[Any]:
    flat: List[Any] = []
    stack = [values]
    while stack:
        v = stack.pop()
        if isinstance(v, (list, tuple)):
            stack.extend(reversed(v))
        elif isinstance(v, (bool, int, float)):
            flat.append(v)
        else:
            raise TypeError(f"{what}: want bytes, a buffer or a (nested) list of numbers; "
                            f"found {type(v).__name__}")
    return flat


def _nested_shape(values: Any) -> List[int]:
    shape = []
    while isinstance(values, (list, tuple)):
        shape.append(len(values))
        values = values[0] if values else None
    return shape


def create_data_spec(data: Any, shape: Optional[Sequence[int]] = None,
                     dtype: Optional[str] = None, compress: Optional[str] = None,
                     include_shape: bool = False) -> TensorSpec:
    """A tensor whose bytes the client gives (keval's addition to the seed's helpers).

    ``data``: ``bytes``/``bytearray``/``memoryview`` or any buffer (``array.array``, a
    C-contiguous numpy array: its shape and dtype are taken when not given), or a nested list of
    numbers (packed as ``dtype``, little-endian). Raw bytes need ``shape`` and ``dtype``
    (default float32). ``compress="zlib"`` compresses (worth it for zeros-heavy or repetitive
    data). ``include_shape`` repeats shape and dtype inside ``data``, as the seed's TensorData
    allowed. The size must be exactly shape x dtype bytes.
    """
    if compress not in (None, "zlib"):
        raise ValueError(f"compress: want 'zlib' or None, got {compress!r}")
    if isinstance(data, (list, tuple)):
        if shape is None:
            shape = _nested_shape(data)
        dtype = _canonical_dtype(dtype or "float32")
        flat = _flatten(data, "data")
        try:
            raw = _bfloat16_bytes(flat) if dtype == "bfloat16" else \
                struct.pack(f"<{len(flat)}{_STRUCT_FORMATS[dtype]}", *flat)
        except (struct.error, OverflowError) as e:
            raise ValueError(f"data: cannot pack as {dtype}: {e}") from None
    else:
        if shape is None and hasattr(data, "shape") and not isinstance(data, memoryview):
            shape = [int(n) for n in data.shape]
        if hasattr(data, "dtype"):
            own = str(getattr(data.dtype, "name", data.dtype))
            # Same-sized types (int32 and float32) would pass the size check below unnoticed.
            if dtype is not None and own in _DTYPE_SIZES and \
                    _canonical_dtype(dtype) != own:
                raise ValueError(f"dtype: {dtype!r} differs from the array's dtype {own!r} "
                                 f"(convert the array, or leave dtype out)")
            dtype = dtype or own
        if dtype is None and isinstance(data, array.array):
            dtype = {"f": "float32", "d": "float64", "b": "int8", "B": "uint8", "h": "int16",
                     "i": "int32", "q": "int64"}.get(data.typecode)
        try:
            view = memoryview(data)
        except TypeError:
            raise TypeError(f"data: want bytes, a buffer (array.array, numpy array) or a "
                            f"nested list of numbers, got {type(data).__name__}") from None
        if not view.c_contiguous:
            raise ValueError("data: the buffer is not C-contiguous (copy it first)")
        if view.format not in ("B", "b", "c") and view.itemsize > 1 and sys.byteorder != "little":
            raise ValueError("data: keval reads little-endian bytes; this machine is big-endian")
        raw = view.tobytes()
        if shape is None:
            raise ValueError("shape: required with raw bytes")
    spec_shape = _check_shape(shape)
    spec_dtype = _check_dtype(dtype or "float32")
    expected = TensorSpec(shape=spec_shape, dtype=spec_dtype).nbytes
    if len(raw) != expected:
        raise ValueError(f"data: {len(raw)} bytes, but shape {spec_shape} {spec_dtype} needs "
                         f"{expected} bytes")
    payload = zlib.compress(raw, 6) if compress == "zlib" else raw
    tensor_data = TensorData(data_b64=base64.b64encode(payload).decode("ascii"),
                             compress=compress,
                             shape=spec_shape if include_shape else None,
                             dtype=spec_dtype if include_shape else None)
    return TensorSpec(shape=spec_shape, dtype=spec_dtype, data=tensor_data)


# -- the builder ---------------------------------------------------------------------------------

def _scalar_type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    raise TypeError(f"value: want an int, float, bool or str, got {type(value).__name__}")


class IOContractBuilder:
    """Builds an ``IOContract`` by method chaining; arguments keep the order they were added in
    (the kernel's call order). Each method checks its arguments at once."""

    def __init__(self) -> None:
        self._args: List[ArgSpec] = []
        self._launch: Optional[LaunchConfig] = None

    def _add(self, arg: ArgSpec) -> "IOContractBuilder":
        for i, existing in enumerate(self._args):
            if existing.name == arg.name:
                raise ValueError(f"name: duplicate argument {arg.name!r} (argument {i})")
        self._args.append(arg)
        return self

    @staticmethod
    def _spec(tensor_spec: Any, name: str) -> TensorSpec:
        if isinstance(tensor_spec, Mapping):
            return TensorSpec.from_dict(tensor_spec)
        if not isinstance(tensor_spec, TensorSpec):
            raise TypeError(f"tensor_spec of {name!r}: want a TensorSpec (create_randn_spec, "
                            f"...), got {type(tensor_spec).__name__}")
        return tensor_spec

    def add_input_tensor(self, name: str, tensor_spec: TensorSpec) -> "IOContractBuilder":
        """An input tensor the kernel reads."""
        return self._add(ArgSpec(name=name, type="tensor", role="input",
                                 tensor_spec=self._spec(tensor_spec, name)))

    def add_output_tensor(self, name: str, shape: Sequence[int],
                          dtype: str = "float32") -> "IOContractBuilder":
        """An output tensor the kernel writes (allocated by the evaluator, compared after)."""
        return self._add(ArgSpec(name=name, type="tensor", role="output",
                                 tensor_spec=TensorSpec(shape=shape, dtype=dtype)))

    def add_inout_tensor(self, name: str, tensor_spec: TensorSpec) -> "IOContractBuilder":
        """A tensor the kernel reads and writes in place (compared after, like an output)."""
        return self._add(ArgSpec(name=name, type="tensor", role="inout",
                                 tensor_spec=self._spec(tensor_spec, name)))

    def add_scalar(self, name: str, type: str, value: Union[int, float, str, bool]
                   ) -> "IOContractBuilder":
        """A scalar argument: ``type`` is ``int``, ``float``, ``bool`` or ``str``."""
        if type == "tensor":
            raise ValueError(f"type of {name!r}: a scalar's type is int, float, bool or str; "
                             f"use add_input_tensor for tensors")
        return self._add(ArgSpec(name=name, type=type, value=value))

    def add_meta_param(self, name: str, value: Union[int, float, bool, str],
                       type: Optional[str] = None) -> "IOContractBuilder":
        """A Triton ``tl.constexpr`` (passed by keyword). The seed took ints; keval also takes
        bool/float/str constexprs, typed from ``value`` unless ``type`` is given."""
        return self._add(ArgSpec(name=name, type=type or _scalar_type_of(value), value=value,
                                 is_meta=True))

    def set_launch_config(self, launch_config: Optional[LaunchConfig] = None, *,
                          grid: Any = None, block: Any = None, num_warps: Optional[int] = None,
                          num_stages: Optional[int] = None,
                          shared_mem_bytes: Optional[int] = None) -> "IOContractBuilder":
        """The launch: a ``LaunchConfig``, or (keval's shortcut) its fields as keywords, e.g.
        ``set_launch_config(grid=(16,), num_warps=4)``."""
        given = any(v is not None for v in (grid, block, num_warps, num_stages,
                                            shared_mem_bytes))
        if launch_config is not None and given:
            raise ValueError("launch_config: give a LaunchConfig or keywords, not both")
        if isinstance(launch_config, Mapping):
            launch_config = LaunchConfig.from_dict(launch_config)
        if launch_config is None:
            launch_config = LaunchConfig(grid=grid, block=block, num_warps=num_warps,
                                         num_stages=num_stages, shared_mem_bytes=shared_mem_bytes)
        if not isinstance(launch_config, LaunchConfig):
            raise TypeError(f"launch_config: want a LaunchConfig, got "
                            f"{type(launch_config).__name__}")
        self._launch = launch_config
        return self

    def build(self) -> IOContract:
        """The contract (a new object each time; the builder may go on)."""
        if not self._args:
            raise ValueError("args: the contract has no arguments (add_input_tensor, ...)")
        return IOContract(args=list(self._args), launch=self._launch)


# -- JSON helpers (the seed's names) ------------------------------------------------------------

_TYPES = {cls.__name__: cls for cls in (IOContract, ArgSpec, TensorSpec, TensorInit, TensorData,
                                        LaunchConfig, LaunchDim)}


def _plain(obj: Any) -> Any:
    if hasattr(obj, "to_dict") and callable(obj.to_dict):
        return _plain(obj.to_dict())
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def to_json(obj: Any, pretty: bool = False) -> str:
    """JSON text of a contract, spec, or any dict/list holding them (a whole request)."""
    return json.dumps(_plain(obj), indent=2 if pretty else None, ensure_ascii=False,
                      allow_nan=False)


def save_to_file(obj: Any, path: str, pretty: bool = True) -> None:
    """Writes ``to_json(obj, pretty)`` to ``path``."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(to_json(obj, pretty=pretty))
        f.write("\n")


def load_from_file(path: str, obj_type: Union[str, type, None] = "IOContract") -> Any:
    """Reads a JSON file as ``obj_type``: ``"IOContract"`` (default), ``"ArgSpec"``,
    ``"TensorSpec"``, ``"TensorInit"``, ``"TensorData"``, ``"LaunchConfig"``, ``"LaunchDim"``,
    one of those classes, or ``None``/``"dict"`` for the plain JSON value."""
    with open(path, "r", encoding="utf-8") as f:
        value = json.load(f)
    if obj_type is None or obj_type in ("dict", dict):
        return value
    cls = _TYPES.get(obj_type) if isinstance(obj_type, str) else obj_type
    if cls is None or cls not in _TYPES.values():
        raise ValueError(f"obj_type: want one of {', '.join(_TYPES)} or 'dict', "
                         f"got {obj_type!r}")
    return cls.from_dict(value)
