"""What an agent needs to know to write a request: JSON schemas and kernel-type notes.

Standard library only: the schemas are published as the MCP tools' input schemas (so that an
agent sees them in ``tools/list``), and the notes are merged into ``list_kernel_types``. The
daemon validates every request in full and names the field at fault, so these schemas describe
rather than police: unknown fields are allowed, as the daemon allows them.
"""

from __future__ import annotations

import json
from typing import Any, Dict

__all__ = [
    "IO_CONTRACT_SCHEMA",
    "KERNEL_SPEC_SCHEMA",
    "KERNEL_TYPE_NOTES",
    "METADATA_SCHEMA",
    "OPTIONS_SCHEMA",
    "RESULT_GUIDE",
    "SERVER_INSTRUCTIONS",
]

_DIM3 = {
    "description": "{\"x\": 4096, \"y\": 1, \"z\": 1}, a list [x, y, z] or one integer; missing "
                   "components are 1.",
    "anyOf": [
        {"type": "object", "properties": {"x": {"type": "integer", "minimum": 1},
                                          "y": {"type": "integer", "minimum": 1},
                                          "z": {"type": "integer", "minimum": 1}}},
        {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1,
         "maxItems": 3},
        {"type": "integer", "minimum": 1},
    ],
}

_INIT = {
    "type": "object",
    "description": "How keval generates the tensor (fresh values for every trial, identical on "
                   "both sides of a compare). Omit for outputs.",
    "properties": {
        "kind": {"type": "string",
                 "enum": ["randn", "uniform", "zeros", "ones", "full", "arange"]},
        "seed": {"type": "integer", "description": "picks the random stream; two arguments "
                                                   "with one seed get the same values"},
        "mean": {"type": "number", "description": "randn"},
        "std": {"type": "number", "description": "randn"},
        "low": {"type": "number", "description": "uniform"},
        "high": {"type": "number", "description": "uniform"},
        "fill_value": {"type": "number", "description": "full"},
        "start": {"type": "number", "description": "arange"},
        "step": {"type": "number", "description": "arange"},
    },
    "required": ["kind"],
}

_TENSOR_SPEC = {
    "type": "object",
    "description": "A tensor argument's shape and dtype, and either init (generated) or data "
                   "(given bytes).",
    "properties": {
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 1}, "maxItems": 8},
        "dtype": {"type": "string",
                  "description": "PyTorch dtype name; default float32 (float16, bfloat16, "
                                 "float64, int32, int64, int8, uint8, bool, ...)"},
        "init": _INIT,
        "data": {"type": "object",
                 "description": "The tensor's bytes instead of init: base64 of exactly "
                                "shape x dtype bytes (little-endian, row-major).",
                 "properties": {"data_b64": {"type": "string"},
                                "compress": {"type": "string", "enum": ["zlib"]}},
                 "required": ["data_b64"]},
    },
    "required": ["shape"],
}

_ARG = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "type": {"type": "string", "enum": ["tensor", "int", "float", "bool", "str"]},
        "role": {"type": "string", "enum": ["input", "output", "inout"],
                 "description": "default input; outputs (and inouts) are what is compared"},
        "is_meta": {"type": "boolean",
                    "description": "a compile-time constant (Triton tl.constexpr): passed as a "
                                   "keyword, never positionally"},
        "value": {"description": "the value of an int/float/bool/str argument"},
        "tensor_spec": _TENSOR_SPEC,
    },
    "required": ["name", "type"],
}

IO_CONTRACT_SCHEMA: Dict[str, Any] = {
    "type": "object",
    "description": (
        "The IOContract: the kernel's arguments in call order and how to launch it. Required "
        "for cuda, triton and multi_kernel; optional for torch and torch_cuda (KernelBench's "
        "get_inputs()/get_init_inputs() supply the inputs otherwise). Example (CUDA vector "
        "add): " + json.dumps({
            "args": [
                {"name": "x", "type": "tensor", "role": "input",
                 "tensor_spec": {"shape": [1048576], "dtype": "float32",
                                 "init": {"kind": "randn", "seed": 1}}},
                {"name": "out", "type": "tensor", "role": "output",
                 "tensor_spec": {"shape": [1048576], "dtype": "float32"}},
                {"name": "n", "type": "int", "value": 1048576}],
            "launch": {"grid": {"x": 4096}, "block": {"x": 256}}})),
    "properties": {
        "args": {"type": "array", "items": _ARG},
        "launch": {
            "type": "object",
            "description": "cuda: grid and block (required), shared_mem_bytes; triton: grid "
                           "(required), num_warps, num_stages.",
            "properties": {
                "grid": _DIM3,
                "block": _DIM3,
                "num_warps": {"type": "integer", "minimum": 1},
                "num_stages": {"type": "integer", "minimum": 1},
                "shared_mem_bytes": {"type": "integer", "minimum": 0},
            },
        },
    },
    "required": ["args"],
}

METADATA_SCHEMA: Dict[str, Any] = {
    "type": "object",
    "description": (
        "Type-specific targeting. cuda: kernel_name (which __global__ kernel when the source "
        "has several), compile_options (NVRTC flags), arg_types ({\"n\": \"int64\"}). triton: "
        "kernel_name. torch/torch_cuda: function_name, or class_name + method_name (default "
        "Model.forward; a compare's candidate uses ModelNew when defined). multi_kernel: "
        "entry_point (required). cuda_program: problem + solution."),
    "additionalProperties": True,
}

KERNEL_SPEC_SCHEMA: Dict[str, Any] = {
    "type": "object",
    "description": "One kernel: its source, its kernel_type, and where the type needs them, "
                   "metadata and an IOContract (io).",
    "properties": {
        "source_code": {"type": "string", "description": "the whole source, as text"},
        "kernel_type": {"type": "string",
                        "description": "torch, torch_cuda, triton, cuda, multi_kernel, "
                                       "cuda_program, or a plugin's own (list_kernel_types)"},
        "metadata": METADATA_SCHEMA,
        "io": IO_CONTRACT_SCHEMA,
    },
    "required": ["source_code", "kernel_type"],
}

OPTIONS_SCHEMA: Dict[str, Any] = {
    "type": "object",
    "description": (
        "Further request fields, passed to the daemon unchanged: num_correctness_trials "
        "(default 5), seed (reproduce a run's inputs: the seed a result reports), strict (true, "
        "or a list of flag names that make the result incorrect), excessive_speedup_threshold "
        "(default 10), max_noise (percent) and min_samples (stop sampling once stable), "
        "device_trace (default true), job_id (your own id), device_metrics (true, or a list "
        "of sections speed_of_light/occupancy/memory/compute/detailed: each kernel's hardware "
        "counters after timing, why it is slow: memory- or compute-bound, occupancy and its "
        "limiters; GPU only, the result says why when there are none), hardware_time (true, or "
        "a number of runs up to 100: each side's kernels timed again after the samples by the "
        "hardware's counters, ncu's gpu__time_duration, in "
        "metadata.profiling.device_work.<side>.hardware_time; GPU only)."),
    "additionalProperties": True,
}

# Per kernel type: what the source must hold and what else the request needs (README "Kernel
# types", docs/compatibility.md, plugins/<type>/README.md). A plugin without notes here is
# described by its own description.
KERNEL_TYPE_NOTES: Dict[str, Dict[str, Any]] = {
    "torch": {
        "source": "PyTorch. By default a KernelBench module: class Model (reference) / ModelNew "
                  "(candidate) with forward(), plus get_inputs() and get_init_inputs(). Or "
                  "metadata.function_name for a module-level function, or metadata.class_name "
                  "+ method_name.",
        "io": "optional: without it the inputs come from get_inputs() (of this source or the "
              "other side's)",
        "devices": "GPU or CPU",
        "example": "examples/torch_kernelbench_compare.json",
    },
    "torch_cuda": {
        "source": "KernelBench's candidate form: a ModelNew whose C++/CUDA code is built with "
                  "torch.utils.cpp_extension.load_inline (or load); keval builds and caches it.",
        "io": "optional (the reference's get_inputs())",
        "devices": "GPU",
        "example": "examples/torch_cuda_kernelbench_add.json",
    },
    "triton": {
        "source": "@triton.jit kernels; metadata.kernel_name picks one when there are several. "
                  "No launch code: keval launches it.",
        "io": "required: args in the kernel's parameter order (tl.constexpr ones with "
              "is_meta: true), launch.grid, optionally num_warps and num_stages",
        "devices": "GPU",
        "example": "examples/triton_vector_add.json",
    },
    "cuda": {
        "source": "CUDA C++ __global__ kernels (and __device__ helpers), no host code; compiled "
                  "by NVRTC. metadata.kernel_name when the source defines several kernels.",
        "io": "required: args in parameter order (tensors become device pointers), "
              "launch.grid and launch.block",
        "devices": "GPU",
        "example": "examples/cuda_vector_add.json",
    },
    "multi_kernel": {
        "source": "A Python script mixing Triton, CuPy and PyTorch; metadata.entry_point names "
                  "the function called with the inputs, which returns the output tensor(s).",
        "io": "required",
        "devices": "GPU, or CPU when it only needs torch",
        "example": "examples/multi_kernel_triton_torch.json",
    },
    "cuda_program": {
        "source": "A whole CUDA program judged by a held-out harness's exit code (ComputeEval): "
                  "metadata.problem and metadata.solution carry it (docs/cuda_program.md).",
        "io": "none",
        "devices": "GPU, or CPU for problems without a compute capability",
    },
}

RESULT_GUIDE = (
    "Result: verdict is 'correct' (compiled, and outputs matched the reference within "
    "atol/rtol on every trial and every timed sample; for evaluate_kernel: it ran), "
    "'incorrect' (ran but wrong or crashed: validation_error says where), 'compile_error' "
    "(compilation_error holds the compiler's or interpreter's log), or 'error' (keval could not "
    "finish: timeout, cancel, no device; error says why; not the kernel's verdict unless the "
    "timeout is the kernel's own doing). speedup = reference median / candidate median (> 1: "
    "the candidate is faster). Times are milliseconds: runtime_ms and ref_runtime_ms give "
    "mean, median, p95, min, max, std, samples and the timing method (cuda_graph/cuda_event on "
    "a GPU, cpu_wall_clock on the CPU). flags are warnings a verdict cannot settle (precision, "
    "degenerate_check, output_aliases_input, excessive_speedup, constant_output, static, "
    "library_only, work_after_completion); they do not change the verdict unless the request "
    "lists them in strict. The summary is compact; call get_job(job_id, detail='full') for the "
    "daemon's whole response (compile info, every validation trial, sandbox, profiling).")

SERVER_INSTRUCTIONS = (
    "keval compiles GPU kernels, checks them against a reference and times them, each job in a "
    "sandboxed process. Use list_kernel_types to see which kernel types this daemon has and what "
    "each expects, health for its GPUs and queue, compare_kernels to judge a candidate against "
    "a reference (correctness and speedup), evaluate_kernel to run and time one kernel, and "
    "get_job / cancel_job for jobs started with wait=false or still running. Keep num_trials "
    "small (10 to 30) while iterating. " + RESULT_GUIDE)
