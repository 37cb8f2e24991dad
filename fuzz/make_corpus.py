#!/usr/bin/env python3
"""Writes the fuzzers' seed corpus, fuzz/corpus/<target>/, from what keval's own tests and
examples send: the request examples (examples/*.json), the fault-plugin requests the daemon tests
use, the JSON examples of the V2 contract's manual when its text is given (--v2-manual), and hand-written
hostile cases (wrong types, absurd sizes, deep nesting, NUL bytes, corrupt base64 and zlib).

    fuzz/make_corpus.py [--v2-manual PATH]      rewrites fuzz/corpus/ (deterministic)

Small on purpose: seeds show the fuzzer the shapes; it finds the rest.
"""
import argparse
import base64
import hashlib
import json
import re
import struct
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def scale_io(n=64, data=None):
    x = {"shape": [n], "dtype": "float32", "init": {"kind": "randn", "seed": 7}}
    if data is not None:
        x = {"shape": [n], "dtype": "float32", "data": data}
    return {"args": [{"name": "x", "type": "tensor", "role": "input", "tensor_spec": x},
                     {"name": "y", "type": "tensor", "role": "output",
                      "tensor_spec": {"shape": [n], "dtype": "float32"}}]}


def fault_kernel(metadata=None, io=None):
    return {"source_code": "// fault injection", "kernel_type": "fault",
            "metadata": metadata or {}, "io": io or scale_io()}


def fault_evaluate(metadata=None, **extra):
    request = {"kernel": fault_kernel(metadata), "num_trials": 5, "timeout": 60}
    request.update(extra)
    return request


def fault_compare(ref=None, custom=None):
    return {"ref_kernel": fault_kernel(ref), "custom_kernel": fault_kernel(custom),
            "num_trials": 5, "timeout": 60}


def requests(v2_manual):
    """(name, body text) pairs."""
    out = []
    for path in sorted((ROOT / "examples").glob("*.json")):
        out.append(("example_" + path.stem, path.read_text()))
    if v2_manual:
        text = Path(v2_manual).read_text()
        for i, block in enumerate(re.findall(r"```json\n(.*?)```", text, re.S)):
            out.append((f"seed000_json_{i}", block)) # some are annotated, not valid JSON: kept
    zeros = struct.pack("<4f", 0.0, 1.0, 2.0, 3.0)
    valid = {
        "fault_evaluate": fault_evaluate(),
        "fault_compare": fault_compare(),
        "fault_async_job_id": fault_evaluate({"fault": "throw_in_launch"}, job_id="soak-1",
                                             **{"async": True}),
        "fault_tolerance": fault_evaluate(tolerance={"atol": 1e-3, "rtol": 1e-3},
                                          num_correctness_trials=2),
        "inline_base64": fault_evaluate(io=None) | {"kernel": fault_kernel(io=scale_io(
            4, {"encoding": "base64", "b64": base64.b64encode(zeros).decode()}))},
        "inline_zlib": {"kernel": fault_kernel(io=scale_io(
            4, {"encoding": "base64", "compress": "zlib",
                "b64": base64.b64encode(zlib.compress(zeros)).decode()}))},
        "launch_config": {"kernel": {"source_code": "__global__ void k(float* x) {}",
                                     "kernel_type": "cuda",
                                     "io": scale_io() | {"launch": {"grid": [2, 1, 1],
                                                                    "block": {"x": 128},
                                                                    "num_warps": 4,
                                                                    "num_stages": 2}}}},
        "scalars": {"kernel": fault_kernel(io={"args": scale_io()["args"] + [
            {"name": "n", "type": "int", "value": 64, "is_meta": True},
            {"name": "alpha", "type": "float", "value": 0.5},
            {"name": "flag", "type": "bool", "value": True},
            {"name": "mode", "type": "str", "value": "fast"}]})},
        "every_init": {"kernel": fault_kernel(io={"args": [
            {"name": f"t{i}", "type": "tensor", "role": "input",
             "tensor_spec": {"shape": [2, 3], "dtype": dtype, "init": init}}
            for i, (dtype, init) in enumerate([
                ("float16", {"kind": "uniform", "low": -1, "high": 1, "seed": 3}),
                ("bfloat16", {"kind": "zeros"}), ("int32", {"kind": "ones"}),
                ("float64", {"kind": "full", "fill_value": 2.5}),
                ("int64", {"kind": "arange", "start": 0, "step": 2}),
                ("bool", {"kind": "randn", "mean": 0, "std": 1})])]})},
    }
    for name, body in valid.items():
        out.append((name, json.dumps(body)))
    hostile = {
        "nul_in_source": json.dumps(fault_evaluate()).replace("// fault injection",
                                                              "// fault\\u0000injection"),
        "wrong_types": json.dumps({"kernel": {"source_code": 7, "kernel_type": ["fault"]},
                                   "num_trials": "many", "timeout": -1}),
        "absurd_shape": json.dumps({"kernel": fault_kernel(io={"args": [
            {"name": "x", "type": "tensor", "role": "input",
             "tensor_spec": {"shape": [2**40, 2**40], "dtype": "float32"}}]})}),
        "negative_shape": json.dumps({"kernel": fault_kernel(io={"args": [
            {"name": "x", "type": "tensor", "role": "input",
             "tensor_spec": {"shape": [-1, 0], "dtype": "float33"}}]})}),
        "corrupt_zlib": json.dumps({"kernel": fault_kernel(io=scale_io(
            4, {"encoding": "base64", "compress": "zlib", "b64": "eJzLSM3JyVcozy/KSQEAGgQEXQ=="}))}),
        "bad_base64": json.dumps({"kernel": fault_kernel(io=scale_io(
            4, {"encoding": "base64", "b64": "!!!not base64==="}))}),
        "deep_nesting": '{"kernel": ' + "[" * 200 + "]" * 200 + "}",
        "huge_numbers": '{"kernel": {"source_code": "x", "kernel_type": "fault"}, '
                        '"num_trials": 1e400, "timeout": 18446744073709551616}',
        "trailing_garbage": json.dumps(fault_evaluate()) + " }{",
        "not_an_object": "[1, 2, 3]",
        "invalid_utf8": b'{"kernel": {"source_code": "\xff\xfe", "kernel_type": "fault"}}'.decode(
            "latin-1"),
        "duplicate_keys": '{"kernel": {"source_code": "a", "source_code": "b", '
                          '"kernel_type": "fault"}}',
        "empty": "",
    }
    out += list(hostile.items())
    return out


def http(method, target, body=b"", headers=None, version="1.1"):
    lines = [f"{method} {target} HTTP/{version}", "Host: localhost"]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    if body or method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def chunked(method, target, body):
    head = (f"{method} {target} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()
    chunks = b""
    for i in range(0, len(body), 40):
        piece = body[i:i + 40]
        chunks += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    return head + chunks + b"0\r\n\r\n"


def http_inputs():
    json_type = {"Content-Type": "application/json"}
    evaluate = json.dumps(fault_evaluate()).encode()
    compare = json.dumps(fault_compare()).encode()
    asynchronous = json.dumps(fault_evaluate(**{"async": True})).encode()
    return {
        "post_evaluate": http("POST", "/evaluate", evaluate, json_type),
        "post_compare": http("POST", "/compare", compare, json_type),
        "post_async": http("POST", "/evaluate", asynchronous, json_type),
        "gpu_type_header": http("POST", "/evaluate", evaluate, json_type | {"X-GPU-Type": "H100"}),
        "post_bad_request": http("POST", "/evaluate", b'{"kernel": 1}', json_type),
        "post_chunked": chunked("POST", "/evaluate", evaluate),
        "expect_continue": http("POST", "/evaluate", evaluate,
                                json_type | {"Expect": "100-continue"}),
        "gets_kept_alive": b"".join(http("GET", t) for t in (
            "/health", "/stats", "/plugins", "/metrics", "/jobs/0123abcd", "/job/x?y=1",
            "/nowhere")),
        "delete_job": http("DELETE", "/jobs/0123abcd"),
        "wrong_methods": http("PUT", "/evaluate", b"{}") + http("POST", "/health", b"{}"),
        "http10_close": http("GET", "/health", version="1.0"),
        "connection_close": http("GET", "/stats", headers={"Connection": "close"}),
        "origin_text_plain": http("POST", "/evaluate", evaluate,
                                  {"Content-Type": "text/plain", "Origin": "https://example.com"}),
        "malformed_request_line": b"GARBAGE\r\n\r\n",
        "bad_content_length": b"POST /evaluate HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
        "huge_content_length": b"POST /evaluate HTTP/1.1\r\nHost: x\r\n"
                               b"Content-Length: 99999999999999\r\n\r\n{}",
        "partial_request": b"POST /evaluate HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"ker",
        "header_folding": b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n b\r\n\r\n",
        "pipelined_mixed": http("GET", "/health") + http("POST", "/compare", compare, json_type)
        + http("DELETE", "/job/abc"),
    }


def frame(message, raw=None):
    payload = raw if raw is not None else json.dumps(message | {"v": 1}).encode()
    return b"KEV1" + struct.pack(">I", len(payload)) + payload


def frame_inputs():
    # First byte: chunk size (low 6 bits), a 512-byte cap (0x40), replay through a socketpair
    # (0x80); the rest is what the peer writes.
    job = {"type": "job", "job_id": "abc", "mode": "evaluate", "seed": 42,
           "request": fault_evaluate(), "plugins": {"fault": "/x/libkeval_fault_plugin.so"}}
    conversation = b"".join(frame(m) for m in [
        {"type": "hello", "worker_version": "0.1.0", "pid": 1234},
        {"type": "phase", "phase": "compiled", "result": {"compiled": True}},
        {"type": "need_device", "device": "cpu"},
        {"type": "grant", "device": {"type": "cpu", "index": 0}},
        {"type": "phase", "phase": "validated", "result": {"correctness": True}},
        {"type": "done"}])
    return {
        "conversation_whole": b"\x80" + conversation,
        "conversation_bytewise": b"\x00" + conversation,
        "conversation_small_cap": b"\xc7" + conversation,
        "job_frame": b"\x85" + frame(job),
        "bad_magic": b"\x80" + b"KEV2" + conversation[4:],
        "oversized_length": b"\x80KEV1\xff\xff\xff\xff{}",
        "not_json": b"\x81" + frame({}, raw=b"{not json"),
        "not_object": b"\x81" + frame({}, raw=b"[1,2]"),
        "wrong_version": b"\x81" + frame({}, raw=b'{"v": 2, "type": "hello"}'),
        "no_type": b"\x81" + frame({}, raw=b'{"v": 1}'),
        "truncated": b"\x83" + conversation[:-7],
        "deep": b"\x81" + frame({}, raw=b'{"v":1,"type":"x","d":' + b"[" * 70 + b"]" * 70 + b"}"),
    }


def write(target, items):
    directory = CORPUS / target
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.iterdir():
        old.unlink()
    for name, data in items:
        if isinstance(data, str):
            data = data.encode("latin-1") if name == "invalid_utf8" else data.encode()
        digest = hashlib.sha1(data).hexdigest()[:8]
        (directory / f"{name}-{digest}").write_bytes(data)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--v2-manual", help="the V2 contract's manual: its JSON examples become seeds")
    args = parser.parse_args()
    write("request", requests(args.v2_manual))
    write("http", http_inputs().items())
    write("frame", frame_inputs().items())
    for target in ("request", "http", "frame"):
        files = list((CORPUS / target).iterdir())
        print(f"fuzz/corpus/{target}: {len(files)} inputs, "
              f"{sum(f.stat().st_size for f in files)} bytes")


if __name__ == "__main__":
    main()
