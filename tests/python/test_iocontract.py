"""keval.iocontract: the seed's builders, round-tripped through keval's own request parser
(``keval check``, which checks a request exactly as the daemon does), their argument checks,
JSON files, and one contract run through a real daemon so its semantics are exercised too.
"""

from __future__ import annotations

import array
import base64
import json
import os
import struct
import zlib

import pytest

from client_support import KEVAL_BIN, keval_check
from keval import Client
from keval.iocontract import (ArgSpec, IOContract, IOContractBuilder, LaunchConfig, LaunchDim,
                              TensorData, TensorInit, TensorSpec, create_arange_spec,
                              create_data_spec, create_full_spec, create_ones_spec,
                              create_randn_spec, create_uniform_spec, create_zeros_spec,
                              load_from_file, save_to_file, to_json)

needs_keval = pytest.mark.skipif(not KEVAL_BIN, reason="KEVAL_BIN is not set")

SPECS = {
    "randn": lambda: create_randn_spec([64, 32], dtype="float32", seed=42, mean=0.5, std=2.0),
    "randn_defaults": lambda: create_randn_spec([8]),
    "uniform": lambda: create_uniform_spec([1024], dtype="float16", seed=43, low=-0.5, high=0.5),
    "zeros": lambda: create_zeros_spec([4, 4], dtype="int32"),
    "ones": lambda: create_ones_spec([3], dtype="bfloat16"),
    "full": lambda: create_full_spec([5], fill_value=3.14, dtype="float64"),
    "arange": lambda: create_arange_spec([2, 3], dtype="int64", start=1, step=2),
    "data": lambda: create_data_spec([[1.0, 2.0], [3.0, 4.0]]),
    "data_zlib": lambda: create_data_spec(bytes(4096), shape=[1024], dtype="float32",
                                          compress="zlib"),
    "data_buffer": lambda: create_data_spec(array.array("q", [1, 2, 3]), shape=[3],
                                            include_shape=True),
    "data_bf16": lambda: create_data_spec([1.0, -2.5], dtype="bfloat16"),
    "alias_dtype": lambda: create_zeros_spec([2], dtype="torch.half"),
}


def triton_contract(spec):
    """The seed's complex example (Triton meta parameters, launch) around one spec."""
    return (IOContractBuilder()
            .add_input_tensor("x", spec)
            .add_output_tensor("result", shape=[16, 8], dtype="float32")
            .add_inout_tensor("acc", create_zeros_spec([16]))
            .add_scalar("alpha", "float", 2.0)
            .add_scalar("n_elements", "int", 1024)
            .add_scalar("transpose", "bool", False)
            .add_scalar("mode", "str", "fast")
            .add_meta_param("BLOCK_SIZE", value=256)
            .add_meta_param("NUM_STAGES", value=2)
            .set_launch_config(LaunchConfig(grid=LaunchDim(x=4, y=1, z=1), num_warps=4,
                                            num_stages=2))
            .build())


def request_with(contract, kernel_type="triton"):
    return {"kernel": {"source_code": "# checked, never run\n", "kernel_type": kernel_type,
                       "io": contract}, "num_trials": 1}


@needs_keval
@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_spec_helper_is_accepted_by_the_parser(name):
    contract = triton_contract(SPECS[name]())
    body = json.loads(to_json(request_with(contract)))
    code, out = keval_check("evaluate", body)
    assert code == 0 and out["valid"], out
    assert out["warnings"] == []  # nothing the builders write is ignored by keval


@needs_keval
def test_cuda_launch_and_a_compare_are_accepted():
    contract = (IOContractBuilder()
                .add_input_tensor("a", create_randn_spec([4096], seed=1))
                .add_input_tensor("b", create_randn_spec([4096], seed=2))
                .add_output_tensor("c", shape=[4096])
                .add_scalar("n", "int", 4096)
                .set_launch_config(grid=(16,), block=[256, 1], shared_mem_bytes=0)
                .build())
    assert contract.launch.grid == LaunchDim(16, 1, 1) and contract.launch.block.y == 1
    kernel = {"source_code": "__global__ void add() {}\n", "kernel_type": "cuda",
              "metadata": {"kernel_name": "add"}, "io": contract}
    request = {"ref_kernel": dict(kernel), "custom_kernel": dict(kernel), "num_trials": 2}
    code, out = keval_check("compare", to_json(request))
    assert code == 0 and out["warnings"] == [], out


@needs_keval
def test_what_the_parser_refuses_python_refuses_first():
    # The parser's verdict on hand-written contracts, and the builders' own on the same mistake.
    good = triton_contract(create_randn_spec([8], seed=1)).to_dict()
    bad = json.loads(json.dumps(good))
    bad["args"][0]["tensor_spec"]["init"] = {"kind": "uniform", "low": 1.0, "high": 0.0}
    code, out = keval_check("evaluate", request_with(bad))
    assert code == 2 and out["error"]["path"] == "kernel.io.args[0].tensor_spec.init"
    with pytest.raises(ValueError, match="low"):
        IOContract.from_dict(bad)
    bad = json.loads(json.dumps(good))
    bad["launch"]["num_warps"] = 3
    code, out = keval_check("evaluate", request_with(bad))
    assert code == 2 and out["error"]["path"] == "kernel.io.launch.num_warps"
    with pytest.raises(ValueError, match="num_warps"):
        IOContract.from_dict(bad)


@pytest.mark.parametrize("make, match", [
    (lambda: create_randn_spec([4, 0]), r"shape\[1\]"),
    (lambda: create_randn_spec([]), "shape"),
    (lambda: create_randn_spec([1] * 9), "shape"),
    (lambda: create_randn_spec([4], std=-1.0), "std"),
    (lambda: create_randn_spec([4], seed=-1), "seed"),
    (lambda: create_uniform_spec([4], low=1.0, high=1.0), "low"),
    (lambda: create_full_spec([4], fill_value=float("inf")), "fill_value"),
    (lambda: create_arange_spec([4], step=0), "step"),
    (lambda: create_zeros_spec([4], dtype="complex64"), "dtype"),
    (lambda: TensorInit(kind="gauss"), "kind"),
    (lambda: TensorInit(kind="zeros", mean=1.0), "mean"),
    (lambda: TensorSpec([2], init=TensorInit("ones"),
                        data=TensorData(base64.b64encode(bytes(8)).decode())), "exclusive"),
    (lambda: create_data_spec(bytes(12), shape=[4], dtype="float32"), "16 bytes"),
    (lambda: create_data_spec(bytes(4)), "shape"),
    (lambda: create_data_spec({"a": 1}, shape=[1]), "data"),
    (lambda: create_data_spec([1.0], compress="gzip"), "compress"),
    (lambda: IOContractBuilder().add_scalar("n", "int", 1.5), "'n'.*value"),
    (lambda: IOContractBuilder().add_scalar("n", "double", 1.5), "'n'.*type"),
    (lambda: IOContractBuilder().add_scalar("n", "tensor", 1), "add_input_tensor"),
    (lambda: IOContractBuilder().add_scalar("", "int", 1), "name"),
    (lambda: IOContractBuilder().add_input_tensor("x", [4]), "tensor_spec of 'x'"),
    (lambda: IOContractBuilder().add_output_tensor("y", shape=[0]), r"shape\[0\]"),
    (lambda: IOContractBuilder().add_scalar("a", "int", 1).add_scalar("a", "int", 2),
     "duplicate"),
    (lambda: IOContractBuilder().build(), "no arguments"),
    (lambda: IOContractBuilder().set_launch_config(num_warps=6), "num_warps"),
    (lambda: IOContractBuilder().set_launch_config(grid=(1, 2, 3, 4)), "grid"),
    (lambda: IOContractBuilder().set_launch_config(grid=0), "grid"),
    (lambda: IOContractBuilder().set_launch_config(LaunchConfig(), grid=1), "not both"),
    (lambda: ArgSpec("x", "tensor", tensor_spec=create_randn_spec([2]), is_meta=True), "meta"),
    (lambda: ArgSpec("y", "tensor", role="output", tensor_spec=create_ones_spec([2])), "output"),
    (lambda: ArgSpec("k", "int", value=1, role="inout"), "role"),
    (lambda: load_from_file(__file__ + ".absent", obj_type="Nope"), ""),
])
def test_bad_arguments_name_the_argument(make, match):
    with pytest.raises((ValueError, TypeError, OSError), match=match):
        make()


def test_defaults_and_shapes_are_the_seeds():
    spec = create_randn_spec([1024, 512])
    assert spec.dtype == "float32" and spec.init.to_dict() == {"kind": "randn", "mean": 0.0,
                                                               "std": 1.0}
    assert create_uniform_spec([3]).init.to_dict() == {"kind": "uniform", "low": 0.0,
                                                       "high": 1.0}
    assert create_arange_spec([3]).init.to_dict() == {"kind": "arange", "start": 0.0,
                                                      "step": 1.0}
    assert create_full_spec([3], 7).to_dict() == {"shape": [3], "dtype": "float32",
                                                  "init": {"kind": "full", "fill_value": 7}}
    out = IOContractBuilder().add_output_tensor("y", shape=[4]).build().to_dict()
    assert out == {"args": [{"name": "y", "type": "tensor", "role": "output",
                             "tensor_spec": {"shape": [4], "dtype": "float32"}}]}
    meta = IOContractBuilder().add_meta_param("EVEN", True).build().args[0]
    assert (meta.type, meta.is_meta) == ("bool", True)


def test_inline_data_bytes():
    spec = create_data_spec([[1.0, 2.0], [3.0, 4.0]])
    assert spec.shape == [2, 2] and spec.dtype == "float32"
    assert spec.data.decode() == struct.pack("<4f", 1, 2, 3, 4)
    packed = create_data_spec(memoryview(bytes(range(6))), shape=[3], dtype="int16",
                              compress="zlib")
    assert packed.data.compress == "zlib"
    assert zlib.decompress(base64.b64decode(packed.data.data_b64)) == bytes(range(6))
    assert create_data_spec([1.0, -2.5], dtype="bfloat16").data.decode() == \
        b"\x80\x3f\x20\xc0"
    assert create_data_spec(array.array("d", [1.5]), shape=[1]).dtype == "float64"


def test_inline_data_from_numpy():
    np = pytest.importorskip("numpy")
    spec = create_data_spec(np.arange(6, dtype=np.int32).reshape(2, 3), compress="zlib")
    assert (spec.shape, spec.dtype) == ([2, 3], "int32")
    assert spec.data.decode() == np.arange(6, dtype=np.int32).tobytes()
    with pytest.raises(ValueError, match="differs from the array's dtype"):
        create_data_spec(np.zeros(4, dtype=np.int32), dtype="float32")
    with pytest.raises(ValueError, match="C-contiguous"):
        create_data_spec(np.zeros((4, 4), dtype=np.float32)[:, 1])


def test_json_files_round_trip(tmp_path):
    contract = triton_contract(create_data_spec([1.0, 2.0, 3.0], compress="zlib"))
    path = str(tmp_path / "c.json")
    save_to_file(contract, path, pretty=True)
    with open(path) as f:
        text = f.read()
    assert text.startswith("{\n  ") and json.loads(text) == contract.to_dict()
    assert load_from_file(path, obj_type="IOContract") == contract
    assert load_from_file(path) == contract
    assert load_from_file(path, obj_type="dict") == contract.to_dict()
    save_to_file(contract.args[0].tensor_spec, path)
    assert load_from_file(path, obj_type=TensorSpec) == contract.args[0].tensor_spec
    assert json.loads(to_json({"kernel": {"io": contract}}))["kernel"]["io"] == \
        contract.to_dict()
    assert "\n" not in to_json(contract)


@needs_keval
def test_a_seed_server_dump_loads(tmp_path):
    # What the seed's pydantic models wrote: every field, nulls and unused defaults included.
    dump = {"args": [
        {"name": "x", "type": "tensor", "value": None, "role": "input", "is_meta": False,
         "tensor_spec": {"shape": [8], "dtype": "float32", "data": None,
                         "init": {"kind": "zeros", "seed": None, "mean": 0.0, "std": 1.0,
                                  "low": 0.0, "high": 1.0, "fill_value": None, "start": 0.0,
                                  "step": 1.0}}},
        {"name": "BLOCK", "type": "int", "value": 8, "tensor_spec": None, "role": "input",
         "is_meta": True}],
        "launch": {"grid": {"x": 1, "y": 1, "z": 1}, "block": None, "num_warps": 4,
                   "num_stages": None}}
    path = tmp_path / "seed.json"
    path.write_text(json.dumps(dump))
    contract = load_from_file(str(path))
    assert contract.args[0].tensor_spec.init == TensorInit(kind="zeros")
    code, out = keval_check("evaluate", to_json(request_with(contract)))
    assert code == 0 and out["warnings"] == [], out


# The kernel asserts what each init kind must have produced: a wrong materialisation fails it.
CHECKER = '''import torch

def check(r1, r2, u, z, o, f, a, d, acc, alpha):
    assert torch.equal(r1, r2), "one seed, one stream"
    assert r1.shape == (4, 8) and r1.dtype == torch.float32 and r1.std() > 0
    assert u.dtype == torch.float16 and bool((u >= -0.5).all()) and bool((u < 0.5).all())
    assert torch.equal(z, torch.zeros(4, dtype=torch.int32))
    assert torch.equal(o, torch.ones(2, 2, dtype=torch.float64))
    assert torch.equal(f, torch.full((3,), 2.5))
    assert torch.equal(a, torch.tensor([[1, 3, 5], [7, 9, 11]], dtype=torch.int64))
    assert torch.equal(d, torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert alpha == 0.5
    acc.add_(d * alpha)
'''


@needs_keval
def test_a_built_contract_runs_as_specified(keval_daemon):
    contract = (IOContractBuilder()
                .add_input_tensor("r1", create_randn_spec([4, 8], seed=7))
                .add_input_tensor("r2", create_randn_spec([4, 8], seed=7))
                .add_input_tensor("u", create_uniform_spec([64], dtype="float16", seed=3,
                                                           low=-0.5, high=0.5))
                .add_input_tensor("z", create_zeros_spec([4], dtype="int32"))
                .add_input_tensor("o", create_ones_spec([2, 2], dtype="float64"))
                .add_input_tensor("f", create_full_spec([3], fill_value=2.5))
                .add_input_tensor("a", create_arange_spec([2, 3], dtype="int64", start=1,
                                                          step=2))
                .add_input_tensor("d", create_data_spec([[1.0, 2.0], [3.0, 4.0]],
                                                        compress="zlib"))
                .add_inout_tensor("acc", create_zeros_spec([2, 2]))
                .add_scalar("alpha", "float", 0.5)
                .build())
    request = {"kernel": {"source_code": CHECKER, "kernel_type": "torch",
                          "metadata": {"function_name": "check"}, "io": contract},
               "num_trials": 2, "num_correctness_trials": 1, "timeout": 120}
    assert keval_check("evaluate", to_json(request))[0] == 0
    with Client(socket_path=keval_daemon.socket_path) as c:
        r = c.evaluate(request)
    worker = r.metadata.get("worker", {})
    assert r.ok, (r.compilation_error, r.validation_error, r.error, worker)
