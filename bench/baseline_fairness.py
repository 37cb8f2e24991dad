#!/usr/bin/env python3
"""Baselines compared with themselves: the speedup keval reports should be 1.00 (issue 13, item 7).

For each example compare it swaps the candidate for the reference itself (`ModelNew = Model` for
a KernelBench Model, the reference's own source for cuda; a function reference is swapped for
the candidate instead) and runs `keval compare` --runs times,
printing per run both sides' methods, medians and the speedup, then the median speedup. Both sides
run the same code, so anything but 1.00 is what keval's timing does to one side and not the other.
With --untraced the same is done with "device_trace": false beside it.

usage: bench/baseline_fairness.py [--keval build/bin/keval] [--runs 3] [--untraced]
                                  [--examples FILE...] [--json FILE]
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["torch_kernelbench_compare.json", "torch_cuda_kernelbench_add.json",
            "cuda_vector_add_compare.json", "triton_compare_torch.json"]


def baseline(example):
    request = json.loads((ROOT / "examples" / example).read_text())
    ref = request["ref_kernel"]
    if ref["kernel_type"] == "cuda":
        request["custom_kernel"] = dict(ref)
    elif "class Model" not in ref["source_code"]:
        # A function reference (its IOContract on the candidate's side, in the type's terms):
        # the candidate against itself.
        request["ref_kernel"] = dict(request["custom_kernel"])
    else:
        request["custom_kernel"] = {"kernel_type": "torch",
                                    "source_code": ref["source_code"] + "\n\nModelNew = Model\n"}
        if "io" in ref:
            request["custom_kernel"]["io"] = ref["io"]
    return request


def run(keval, request, tmp):
    path = Path(tmp) / "request.json"
    path.write_text(json.dumps(request))
    r = subprocess.run([keval, "compare", str(path)], capture_output=True, text=True, timeout=600)
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError:
        sys.exit(f"baseline_fairness: keval printed no result (exit {r.returncode}):\n{r.stderr[-3000:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keval", default=str(ROOT / "build/bin/keval"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--untraced", action="store_true", help='also with "device_trace": false')
    parser.add_argument("--examples", nargs="+", default=EXAMPLES, help="files under examples/")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    rows = []
    variants = [("traced", {})] + ([("untraced", {"device_trace": False})] if args.untraced else [])
    print(f"{'example':34s} {'variant':9s} {'run':>3s} {'ref method':>11s} {'ref us':>9s} "
          f"{'cand method':>11s} {'cand us':>9s} {'speedup':>8s}")
    with tempfile.TemporaryDirectory(prefix="keval-fairness-") as tmp:
        for example in args.examples:
            for variant, extra in variants:
                speedups = []
                for i in range(args.runs):
                    result = run(args.keval, dict(baseline(example), **extra), tmp)
                    ref = result.get("ref_runtime") or {}
                    cand = result.get("kernel_exec_result", {}).get("runtime_stats", {})
                    speedup = result.get("speedup")
                    if speedup is None:
                        print(f"{example:34s} {variant:9s} {i + 1:3d}  no speedup: "
                              f"{result.get('compilation_error') or result.get('validation_error') or result.get('profiling_error')}")
                        continue
                    speedups.append(speedup)
                    rows.append({"example": example, "variant": variant, "run": i + 1, "ref": ref,
                                 "candidate": cand, "speedup": speedup})
                    print(f"{example:34s} {variant:9s} {i + 1:3d} {ref.get('method', '?'):>11s} "
                          f"{ref.get('median', 0) * 1e3:9.2f} {cand.get('method', '?'):>11s} "
                          f"{cand.get('median', 0) * 1e3:9.2f} {speedup:8.3f}")
                if speedups:
                    print(f"{example:34s} {variant:9s} median speedup {statistics.median(speedups):.3f} "
                          f"over {len(speedups)} runs")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
