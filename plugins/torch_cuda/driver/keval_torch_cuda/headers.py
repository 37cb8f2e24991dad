"""The torch header sets a translation unit is compiled against.

Parsing torch's headers is most of a build (nvcc parses them three times: cudafe++, cicc and
the host compiler), so each unit is compiled with the smallest set that compiles it; the sets,
in order of preference (the first that compiles is used, see Builder._compile_unit):

  lean     torch/types.h and ATen/ATen.h without the declarations of every operator
           (ATen/Functions.h; the dispatcher and op-registration headers torch/types.h pulls in
           "for torchvision"), with AT_PER_OPERATOR_HEADERS: the way torch compiles its own
           sources, each header including the operators it uses. Tensors, their methods, the
           factories (torch::empty, zeros_like, ...), TORCH_CHECK and AT_DISPATCH are all there:
           what KernelBench's kernels and wrappers use, parsed in much less time than
           torch/types.h (plugins/torch_cuda/README.md, Measured). A unit that calls any other
           operator (torch::sigmoid) does not compile with it and gets the next set. Lean headers
           are derived from the installed torch's own files by dropping exactly LEAN_DROPS; a
           line not found is not dropped, so a torch that differs only makes the set less lean.
  trimmed  torch/extension.h as TRIMMED_EXTENSION_H: torch/types.h, plus pybind11 and torch's
           casters for the bindings. The C++ frontend (nn, optim, data, jit, serialization) is
           left out.
  full     torch's own headers, as torch's build compiles the unit.

A unit that compiles with a set compiles with the next to the same program: each set only
leaves declarations out, and an operator's overloads are declared together.

The sets' files are written into the cache's ``headers/``, in directories named by their
content, and selected with -I ahead of torch's own include directories.
"""
import hashlib
import json
import os
import shutil
import uuid

# main.cpp includes torch/extension.h through a header of keval's own (PCH_HEADER), which can be
# precompiled ahead of jobs (precompiled_header.py): parsing torch's headers is most of a build.
# Every header set provides it.
PCH_HEADER = "keval_torch_extension.h"
PCH_HEADER_TEXT = "#include <torch/extension.h>\n"

LEAN_DEFINE = "-DAT_PER_OPERATOR_HEADERS"
LEAN_DROPS = {
    "torch/types.h": ["#include <ATen/core/dispatch/Dispatcher.h>", "#include <torch/library.h>"],
    "ATen/ATen.h": ["#include <ATen/Functions.h>"],
}
# The text names the directory it is written to, and through it the precompiled headers' key:
# its first line still names the file it came from (torch_cuda_build.py) so that the headers and
# precompiled headers already in caches stay in use.
TRIMMED_EXTENSION_H = """// keval: torch/extension.h trimmed (torch_cuda_build.py)
#pragma once
#include <torch/types.h>
#ifndef __CUDACC__
#include <torch/csrc/utils/pybind.h>
#endif
"""


def header_flags(cache_dir, include_paths, create=True):
    """{header set: the compiler flags selecting it}, the files written below ``cache_dir``;
    "lean" is absent when the torch on ``include_paths`` has none of the lines it drops. With
    ``create`` false (a cache this process may only read), None unless every file is there."""
    sets = {"prelude": {PCH_HEADER: PCH_HEADER_TEXT},
            "trimmed": {"torch/extension.h": TRIMMED_EXTENSION_H}}
    lean = lean_headers(include_paths)
    if lean:
        sets["lean"] = lean
    dirs = {}
    for name, files in sets.items():
        dirs[name] = _header_dir(cache_dir, files, create)
        if dirs[name] is None:
            return None
    prelude, trimmed = "-I" + dirs["prelude"], "-I" + dirs["trimmed"]
    flags = {"trimmed": [trimmed, prelude], "full": [prelude]}
    if lean:
        flags["lean"] = [LEAN_DEFINE, f"-I{dirs['lean']}", trimmed, prelude]
    return flags


def lean_headers(include_paths):
    """{relative path: text} of the lean header set: each file of LEAN_DROPS as the first of
    ``include_paths`` holding it has it, less the lines dropped; empty when no line was found."""
    files = {}
    for relative, drops in LEAN_DROPS.items():
        for directory in include_paths:
            path = os.path.join(directory, relative)
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    lines = f.read().splitlines(keepends=True)
                kept = [line for line in lines if line.strip() not in drops]
                if len(kept) < len(lines):
                    files[relative] = "".join(kept)
                break
    return files


def _header_dir(cache_dir, files, create=True):
    """A directory in the cache holding ``files`` ({relative path: text}), named by their
    content and put in place by rename (written once, never changed); without ``create``, None
    when it is not there."""
    material = json.dumps(files, sort_keys=True).encode("utf-8")
    directory = os.path.join(cache_dir, "headers", hashlib.sha256(material).hexdigest()[:16])
    if os.path.isdir(directory):
        return directory
    if not create:
        return None
    staging = f"{directory}.tmp-{uuid.uuid4().hex}"
    for relative, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(staging, relative)), exist_ok=True)
        write_file(staging, relative, text)
    try:
        os.rename(staging, directory)
    except OSError:  # another job put the same files there first
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def includes_trimmed(step, trimmed_include):
    """Whether nvcc's preprocessed output for the failed ``step`` went through the trimmed
    torch/extension.h (its line markers name every file included), i.e. whether torch's own
    headers could make a difference. Without the kept stages (plain nvcc ran), assume so."""
    keep_dir = os.path.join(os.path.dirname(step["file"]),
                            "nvcc_stages_" + os.path.basename(step["file"]))
    marker = os.path.join(trimmed_include[2:], "torch", "extension.h").encode()
    found_any = False
    try:
        names = os.listdir(keep_dir)
    except OSError:
        return True
    for file_name in names:
        if file_name.endswith(".ii"):
            found_any = True
            with open(os.path.join(keep_dir, file_name), "rb") as f:
                if marker in f.read():
                    return True
    return not found_any


def write_file(directory, file_name, text):
    """Writes ``text`` as ``directory/file_name`` and returns its path (header sets, the
    precompiled header's source and the build's translation units)."""
    path = os.path.join(directory, file_name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path
