"""keval's builder for torch C++/CUDA extensions (kernel_type "torch_cuda").

It serves ``torch.utils.cpp_extension.load_inline`` and ``load`` for the submitted source (see
torch_cuda_shim) and replaces torch's ninja build with one made for a single job:

  - only the granted GPU's architecture (``-gencode arch=compute_XY,code=sm_XY``);
  - translation units compiled in parallel (nvcc and the host compiler at once), then one link;
  - a content-addressed cache keyed by everything that changes the binary: the generated
    translation units, every flag, the headers in the user's include directories (by content,
    not path: load()'s files hit the cache across jobs), torch's version and CUDA version, the C++
    ABI, the nvcc and host-compiler versions, the architecture and the Python version;
  - the module is named ``<name>_<key prefix>``, so two kernels that use the same ``name=`` are
    two different modules (torch's own cache would hand the second job the first one's build);
  - the build runs in the job's work directory and its result enters the cache by an atomic
    rename of a finished directory; an entry carries a manifest with the SHA-256 of its library,
    checked before every use, so a half-written or corrupted entry is never loaded (it is rebuilt);
  - concurrent jobs building the same key serialise on a lock file: one builds, the others wait
    and load its entry.

Cache location: ``$KEVAL_CACHE_DIR/torch_cuda``, else ``$XDG_CACHE_HOME/keval/torch_cuda``,
else ``~/.cache/keval/torch_cuda``.
"""
import fcntl
import functools
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from . import launch_streams, nvcc_pipeline

# Bumped when the layout of an entry or the way translation units are generated changes.
CACHE_FORMAT = 2
MANIFEST = "manifest.json"

# What torch's load_inline puts at the top of each generated file (torch/utils/cpp_extension.py).
# main.cpp includes torch/extension.h through a header of keval's own (PCH_HEADER), which can be
# precompiled ahead of jobs (Builder.prepare): parsing torch's headers is most of a build.
PCH_HEADER = "keval_torch_extension.h"
PCH_HEADER_TEXT = "#include <torch/extension.h>\n"
CPP_PRELUDE = f'#include "{PCH_HEADER}"\n'
CUDA_PRELUDE = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"

# The header sets a unit is compiled against, in order of preference; the first that compiles
# is used (see Builder._compile_unit):
#   lean     torch/types.h and ATen/ATen.h without the declarations of every operator
#            (ATen/Functions.h; the dispatcher and op-registration headers torch/types.h pulls in
#            "for torchvision"), with AT_PER_OPERATOR_HEADERS: the way torch compiles its own
#            sources, each header including the operators it uses. Tensors, their methods, the
#            factories (torch::empty, zeros_like, ...), TORCH_CHECK and AT_DISPATCH are all
#            there: what KernelBench's kernels and wrappers use. nvcc parses the headers three
#            times (cudafe++, cicc, the host compiler); measured on an H100, parsing takes 6.3 s
#            instead of torch/types.h's 10.4 s (g++ -fsyntax-only), and nvcc on KernelBench's
#            cuda.cu 13.4-14.7 s instead of 18-23 s. A unit that calls any other operator
#            (torch::sigmoid) does not compile with it and gets the next set. Lean headers are
#            derived from the installed torch's own files by dropping exactly LEAN_DROPS; a
#            line not found is not dropped, so a torch that differs only makes the set less lean.
#   trimmed  torch/extension.h as TRIMMED_EXTENSION_H: torch/types.h, plus pybind11 and torch's
#            casters for the bindings. The C++ frontend (nn, optim, data, jit, serialization) is
#            left out.
#   full     torch's own headers, as torch's build compiles the unit.
# A unit that compiles with a set compiles with the next to the same program: each set only
# leaves declarations out, and an operator's overloads are declared together.
LEAN_DEFINE = "-DAT_PER_OPERATOR_HEADERS"
LEAN_DROPS = {
    "torch/types.h": ["#include <ATen/core/dispatch/Dispatcher.h>", "#include <torch/library.h>"],
    "ATen/ATen.h": ["#include <ATen/Functions.h>"],
}
TRIMMED_EXTENSION_H = """// keval: torch/extension.h trimmed (torch_cuda_build.py)
#pragma once
#include <torch/types.h>
#ifndef __CUDACC__
#include <torch/csrc/utils/pybind.h>
#endif
"""
# torch's flags for extensions' CUDA units (cpp_extension.COMMON_NVCC_FLAGS).
TORCH_NVCC_FLAGS = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
                    "--expt-relaxed-constexpr"]


class BuildFailed(Exception):
    """A compiler or the linker failed; ``output`` is everything it printed, in full."""

    def __init__(self, name, tool, returncode, output, steps=()):
        super().__init__(f"building the extension '{name}' failed: {tool} "
                         f"exited with status {returncode}")
        self.name = name
        self.tool = tool
        self.returncode = returncode
        self.output = output
        self.steps = list(steps)  # what ran, for the build record


def cache_root():
    explicit = os.environ.get("KEVAL_CACHE_DIR")
    if explicit:
        base = explicit
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = os.path.join(xdg, "keval") if xdg else os.path.join(
            os.path.expanduser("~"), ".cache", "keval")
    return os.path.join(base, "torch_cuda")


def as_list(value):
    """load_inline accepts one string or a list of strings (None: none)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def flag_list(value):
    """Flags as load_inline takes them, without empty ones: torch writes flags into a ninja file,
    where KernelBench's ``extra_cflags=[""]`` vanishes; passed to a compiler it names a file."""
    return [flag for flag in as_list(value) if flag.strip()]


class Extension:
    """One load_inline/load call, normalised: the translation units' text and every flag."""

    def __init__(self, name, cpp_units, cuda_units, extra_cflags=None, extra_cuda_cflags=None,
                 extra_ldflags=None, extra_include_paths=None, with_cuda=None):
        self.name = str(name)
        self.cpp_units = list(cpp_units)  # [(file name, text)]
        self.cuda_units = list(cuda_units)
        self.extra_cflags = flag_list(extra_cflags)
        self.extra_cuda_cflags = flag_list(extra_cuda_cflags)
        self.extra_ldflags = flag_list(extra_ldflags)
        self.extra_include_paths = [os.path.abspath(p) for p in as_list(extra_include_paths)]
        self.with_cuda = bool(cuda_units) if with_cuda is None else bool(with_cuda)
        self.notes = []  # how keval's build departs from torch's, for the build record
        self._fingerprints = {}  # include directory -> what of it enters the cache key
        self._launch_on_current_stream()

    def _launch_on_current_stream(self):
        """Bare <<<grid, block>>> launches go on torch's current stream, so that a graph capture
        takes them (launch_streams.py says why)."""
        units, total = [], 0
        for file_name, text in self.cuda_units:
            text, count = launch_streams.put_launches_on_current_stream(text)
            if count:
                total += count
                at = len(CUDA_PRELUDE) if text.startswith(CUDA_PRELUDE) else 0
                text = text[:at] + launch_streams.STREAM_PRELUDE + text[at:]
            units.append((file_name, text))
        self.cuda_units = units
        if total:
            self.notes.append(f"{total} kernel launch(es) without a stream were put on torch's "
                              "current stream (a graph capture takes them; the legacy default "
                              "stream cannot be captured)")

    @classmethod
    def inline(cls, name, cpp_sources, cuda_sources=None, functions=None, **flags):
        """The translation units torch's load_inline generates: main.cpp (cpp_sources and, when
        ``functions`` is given, the pybind11 bindings) and cuda.cu (cuda_sources)."""
        cpp_sources = as_list(cpp_sources)
        cuda_sources = as_list(cuda_sources)
        # The module name is defined in the source, after the precompiled header, rather than
        # with -D: a precompiled header is only valid under the same command-line macros.
        main = (CPP_PRELUDE + "#define TORCH_EXTENSION_NAME KEVAL_TORCH_EXTENSION_NAME\n" +
                "\n".join(cpp_sources))
        bindings = ""
        if functions is not None:
            if isinstance(functions, str):
                functions = [functions]
            if isinstance(functions, dict):
                bound = list(functions.items())
            else:
                bound = [(f, f) for f in functions]
            defs = "".join(f'm.def("{fn}", &{fn}, "{doc}");\n' for fn, doc in bound)
            # KEVAL_TORCH_EXTENSION_NAME is defined on the command line (the unique module name).
            bindings = f"\n\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{\n{defs}}}\n"
        if cuda_sources and any("<<<" in source for source in cpp_sources):
            # The V2 contract's TORCH_CUDA form launches the kernel from cpp_sources, which no host
            # compiler accepts (its server rewrote the launch). Here the wrapper is compiled by
            # nvcc in one unit after cuda_sources, bindings last, so such requests still build.
            unit = (CUDA_PRELUDE + "\n".join(cuda_sources) + "\n" + "\n".join(cpp_sources) +
                    ("\n#include <torch/csrc/utils/pybind.h>" + bindings if bindings else ""))
            extension = cls(name, [], [("cuda.cu", unit)], **flags)
            extension.notes.append("cpp_sources launch CUDA kernels (<<<...>>>), which a host "
                                   "compiler cannot compile: they were compiled by nvcc in one "
                                   "unit after cuda_sources")
            return extension
        cuda_units = [("cuda.cu", CUDA_PRELUDE + "\n".join(cuda_sources))] if cuda_sources else []
        return cls(name, [("main.cpp", main + bindings)], cuda_units, **flags)

    @classmethod
    def from_files(cls, name, sources, **flags):
        """torch's load(): the named files as they are; .cu/.cuh go to nvcc."""
        cpp_units, cuda_units = [], []
        for index, path in enumerate(as_list(sources)):
            with open(path, encoding="utf-8") as f:
                text = f.read()
            base = f"{index}_{os.path.basename(path)}"
            (cuda_units if path.endswith((".cu", ".cuh")) else cpp_units).append((base, text))
        # The sources' own directories, so their relative #includes resolve from the job dir.
        dirs = sorted({os.path.dirname(os.path.abspath(p)) for p in as_list(sources)})
        flags["extra_include_paths"] = as_list(flags.get("extra_include_paths")) + dirs
        return cls(name, cpp_units, cuda_units, **flags)

    def describe(self):
        """What enters the cache key. An include directory enters by its content (the headers
        a unit may include from it), not its path: a header edited between two jobs must not
        hit the first job's build, and load()'s files, which sit in each job's own directory,
        should still hit the cache across jobs."""
        return {"name": self.name,
                "cpp_units": self.cpp_units, "cuda_units": self.cuda_units,
                "extra_cflags": self.extra_cflags, "extra_cuda_cflags": self.extra_cuda_cflags,
                "extra_ldflags": self.extra_ldflags,
                "extra_include_paths": [self._include_fingerprint(p)
                                        for p in self.extra_include_paths],
                "with_cuda": self.with_cuda}

    def _include_fingerprint(self, directory):
        if directory not in self._fingerprints:
            digest, why = fingerprint_include_dir(directory)
            if digest is None:
                # Unknown content must never match another build: this one is not reused.
                digest = "unshared-" + uuid.uuid4().hex
                self.notes.append(f"include directory {directory} {why}: its build is not "
                                  "reused by other jobs")
            self._fingerprints[directory] = digest
        return self._fingerprints[directory]


# Files of an include directory that can be #included, and how much of it is read to key a build.
HEADER_SUFFIXES = (".h", ".hh", ".hpp", ".hxx", ".cuh", ".inc", ".inl", ".ipp", ".tcc", ".def",
                   ".c", ".cc", ".cpp", ".cxx", ".cu")
FINGERPRINT_MAX_FILES = 2000
FINGERPRINT_MAX_BYTES = 32 << 20


def fingerprint_include_dir(directory):
    """SHA-256 over the relative path and content of every includable file below ``directory``
    (keval's own build directories left out), or (None, why) when it cannot be read or is too
    large to read for every build."""
    if not os.path.isdir(directory):
        return "absent", None  # the compilers skip it too
    digest = hashlib.sha256()
    files = total = 0
    try:
        for root, dirs, names in os.walk(directory, onerror=_raise):
            dirs[:] = sorted(d for d in dirs if not d.startswith("torch_cuda_build_"))
            for file_name in sorted(names):
                if not file_name.endswith(HEADER_SUFFIXES):
                    continue
                path = os.path.join(root, file_name)
                files += 1
                total += os.path.getsize(path)
                if files > FINGERPRINT_MAX_FILES or total > FINGERPRINT_MAX_BYTES:
                    return None, (f"holds more than {FINGERPRINT_MAX_FILES} headers or "
                                  f"{FINGERPRINT_MAX_BYTES >> 20} MiB")
                digest.update(os.path.relpath(path, directory).encode("utf-8") + b"\0")
                digest.update(_sha256_of(path).encode("ascii"))
    except OSError as exc:
        return None, f"cannot be read ({exc})"
    return "sha256:" + digest.hexdigest(), None


def _raise(error):
    raise error


class Toolchain:
    """The installed torch, nvcc and host compiler, and what of them enters the cache key."""

    def __init__(self, cuda_arch):
        import torch
        import torch.utils.cpp_extension as cpp_extension

        self.cuda_arch = None if cuda_arch is None else int(cuda_arch)  # None: host only
        self.cuda_home = cpp_extension.CUDA_HOME or "/usr/local/cuda"
        self.nvcc = os.path.join(self.cuda_home, "bin", "nvcc")
        self.cxx = os.environ.get("CXX") or shutil.which("c++") or "g++"
        self.include_paths = cpp_extension.include_paths() + [
            os.path.join(self.cuda_home, "include"), sysconfig.get_paths()["include"]]
        self.torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
        abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", 1))
        self.defines = ["-DTORCH_API_INCLUDE_EXTENSION_H", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
        pybind_flags = getattr(cpp_extension, "_get_pybind11_abi_build_flags", None)
        if pybind_flags is not None:
            # Written for a shell (-DPYBIND11_COMPILER_TYPE=\"_gcc\"); keval runs the compilers
            # without one, so the backslashes would reach the macro.
            self.defines += [flag.replace('\\"', '"') for flag in pybind_flags()]
        with ThreadPoolExecutor(2) as pool:
            nvcc_version = pool.submit(_version_of, self.nvcc)
            cxx_version = pool.submit(_version_of, self.cxx)
            self.key_parts = {
                "torch": torch.__version__, "torch_cuda": torch.version.cuda,
                "cxx11_abi": abi, "python": sys.version.split()[0],
                "nvcc": nvcc_version.result(), "cxx": cxx_version.result(),
                "cxx_path": self.cxx, "nvcc_path": self.nvcc, "arch": self.cuda_arch,
                "defines": self.defines, "include_paths": self.include_paths}


@functools.lru_cache(maxsize=None)
def _version_of(tool):
    """``tool --version``, asked once per process: a prestarted worker's prewarm asks, and its
    job computes its cache key without starting nvcc and the host compiler again."""
    try:
        done = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60)
        return done.stdout.strip()
    except OSError as exc:
        return f"unavailable: {exc}"


def cache_key(extension, toolchain_key_parts):
    """SHA-256 of everything that determines the built library, as canonical JSON."""
    material = {"format": CACHE_FORMAT, "extension": extension.describe(),
                "toolchain": toolchain_key_parts}
    text = json.dumps(material, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def module_name(extension, key):
    """A valid Python identifier unique to the key: the user's name plus the key's prefix."""
    safe = "".join(c if c.isalnum() or c == "_" else "_" for c in extension.name) or "ext"
    if safe[0].isdigit():
        safe = "_" + safe
    return f"{safe}_{key[:16]}"


def _sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_entry(entry_dir, key):
    """The entry's library path when it is complete and intact, else None (with why)."""
    if not os.path.isdir(entry_dir):
        return None, "missing"
    try:
        with open(os.path.join(entry_dir, MANIFEST), encoding="utf-8") as f:
            manifest = json.load(f)
        library = os.path.join(entry_dir, manifest["library"])
        if manifest.get("key") != key or manifest.get("format") != CACHE_FORMAT:
            return None, "manifest does not match the key"
        if _sha256_of(library) != manifest["sha256"]:
            return None, "library checksum mismatch"
        return library, None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"unreadable manifest: {exc}"


class Builder:
    """Builds and caches extensions for one job; ``builds`` records what each call did."""

    def __init__(self, work_dir, cuda_arch, cache_dir=None, toolchain=None):
        self.work_dir = work_dir
        self.cuda_arch = cuda_arch
        self.cache_dir = cache_dir or cache_root()
        self._toolchain = toolchain
        self._header_flags = None
        self.builds = []  # one dict per load_inline/load call, for the compile info
        self.failure = None  # the BuildFailed that ended the last failed call

    @property
    def toolchain(self):
        if self._toolchain is None:
            self._toolchain = Toolchain(self.cuda_arch)
        return self._toolchain

    def load(self, extension, verbose=False):
        """Returns the loaded module for ``extension``, building it when it is not cached."""
        started = time.monotonic()
        toolchain = self.toolchain
        key = cache_key(extension, toolchain.key_parts)
        name = module_name(extension, key)
        entry = os.path.join(self.cache_dir, key[:2], key)
        record = {"name": extension.name, "module": name, "key": key, "entry": entry}
        if extension.notes:
            record["notes"] = list(extension.notes)
        library, why = verify_entry(entry, key)
        if library is None:
            os.makedirs(os.path.dirname(entry), exist_ok=True)
            with open(os.path.join(os.path.dirname(entry), key + ".lock"), "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # one builder per key; the others wait here
                library, why_now = verify_entry(entry, key)
                if library is None:
                    record["cache"] = "rebuilt" if why_now != "missing" else "miss"
                    if why_now != "missing":
                        record["refused_entry"] = why_now
                    try:
                        library, record["steps"] = self._build(extension, key, name, entry,
                                                               verbose)
                    except BuildFailed as failure:
                        self.failure = failure
                        record["cache"] = "failed"
                        record["steps"] = failure.steps
                        self.builds.append(record)
                        raise
                else:
                    record["cache"] = "hit_after_wait"
        else:
            record["cache"] = "hit"
        module = _import_extension(name, library)
        record["seconds"] = round(time.monotonic() - started, 3)
        self.builds.append(record)
        return module

    def _header_dir(self, files):
        """A directory in the cache holding ``files`` ({relative path: text}), named by their
        content and put in place by rename (written once, never changed)."""
        material = json.dumps(files, sort_keys=True).encode("utf-8")
        directory = os.path.join(self.cache_dir, "headers",
                                 hashlib.sha256(material).hexdigest()[:16])
        if os.path.isdir(directory):
            return directory
        staging = f"{directory}.tmp-{uuid.uuid4().hex}"
        for relative, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(staging, relative)), exist_ok=True)
            _write(staging, relative, text)
        try:
            os.rename(staging, directory)
        except OSError:  # another job put the same files there first
            shutil.rmtree(staging, ignore_errors=True)
        return directory

    def header_flags(self):
        """{header set: the compiler flags selecting it} (see LEAN_DROPS and the sets above);
        "lean" is absent when the installed torch has none of the lines it drops."""
        if self._header_flags is None:
            prelude = "-I" + self._header_dir({PCH_HEADER: PCH_HEADER_TEXT})
            trimmed = "-I" + self._header_dir({"torch/extension.h": TRIMMED_EXTENSION_H})
            self._header_flags = {"trimmed": [trimmed, prelude], "full": [prelude]}
            lean = lean_headers(self.toolchain.include_paths)
            if lean:
                self._header_flags["lean"] = [LEAN_DEFINE, f"-I{self._header_dir(lean)}",
                                              trimmed, prelude]
        return self._header_flags

    def _cxx_flags(self, header_set, extension=None):
        toolchain = self.toolchain
        user_includes = [f"-I{p}" for p in extension.extra_include_paths] if extension else []
        return (["-fPIC", "-std=c++17"] + toolchain.defines + user_includes +
                self.header_flags()[header_set] + [f"-I{p}" for p in toolchain.include_paths] +
                (extension.extra_cflags if extension else []))

    def _pch_dir(self, cxx_flags):
        """Where the precompiled keval_torch_extension.h for these host flags is (or goes).
        The architecture is not part of it: the host compile does not depend on it."""
        parts = {k: v for k, v in self.toolchain.key_parts.items() if k != "arch"}
        material = json.dumps({"format": CACHE_FORMAT, "toolchain": parts, "flags": cxx_flags},
                              sort_keys=True)
        return os.path.join(self.cache_dir, "pch", hashlib.sha256(material.encode()).hexdigest())

    def prepare(self, wait=True):
        """Precompiles keval_torch_extension.h for the trimmed header set and no extra flags
        (KernelBench's load_inline calls) unless the cache has it or another process is
        building it. A build never waits for a precompiled header, it uses one that is there:
        the torch_cuda type's prewarm (keval serve's prestarted workers) calls this with
        ``wait=False``, which starts the compiler in a process of its own session, holding the
        lock, and returns at once: a prestarted worker is ready for a job in seconds, not
        after the 20 s the header takes, and the header is finished even if that worker's job
        ends first. Returns "present", "being built", "started" or, with ``wait``, "built" or
        "failed" (the compiler's output is in the directory's log)."""
        cxx_flags = self._cxx_flags("trimmed")
        pch_dir = self._pch_dir(cxx_flags)
        if os.path.exists(os.path.join(pch_dir, "complete")):
            return "present"
        os.makedirs(os.path.dirname(pch_dir), exist_ok=True)
        with open(pch_dir + ".lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return "being built"
            if os.path.exists(os.path.join(pch_dir, "complete")):
                return "present"
            staging = f"{pch_dir}.tmp-{uuid.uuid4().hex}"
            os.makedirs(staging)
            header = _write(staging, PCH_HEADER, PCH_HEADER_TEXT)
            gch = os.path.join(staging, PCH_HEADER + ".gch")
            command = [self.toolchain.cxx, "-x", "c++-header", header, "-o", gch] + cxx_flags
            # Published as a whole by rename, "complete" last inside it; a .gch only if the
            # compiler succeeded. The lock goes with the process (its inherited descriptor).
            quoted = {k: shlex.quote(v) for k, v in
                      (("gch", gch), ("staging", staging), ("final", pch_dir))}
            script = ('"$@" > log 2>&1; status=$?\n'
                      f'[ "$status" -eq 0 ] || rm -f {quoted["gch"]}\n'
                      'echo "{\\"status\\": $status}" > complete\n'
                      f'rm -rf {quoted["final"]} && mv {quoted["staging"]} {quoted["final"]}\n')
            process = subprocess.Popen(["/bin/sh", "-c", script, "sh"] + command, cwd=staging,
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, start_new_session=True,
                                       pass_fds=(lock.fileno(),))
        if not wait:
            return "started"
        process.wait()
        return "built" if os.path.exists(os.path.join(pch_dir, PCH_HEADER + ".gch")) else "failed"

    def _compile_unit(self, attempt, header_sets, fallback=None):
        """Compiles one unit with the first of ``header_sets`` that compiles, and with
        ``fallback[0]`` when none does and ``fallback[1](the failed step)`` says it may help.
        ``attempt(header set)`` returns (returncode, output, step). One after another, not
        side by side: measured on an H100, with the trimmed attempt running beside it the lean
        nvcc took 16.8 s, alone 13.4-14.7 s; every build would pay that so that the units the
        lean set cannot compile save the lean attempt's time. Returns (returncode, output,
        step) with the header set used and, when there was more than one, every attempt."""
        started = time.monotonic()
        tried = []
        candidates = list(header_sets)
        while candidates:
            header_set = candidates.pop(0)
            returncode, output, step = attempt(header_set)
            tried.append(f"{header_set}: {step['seconds']} s" +
                         ("" if returncode == 0 else " (did not compile)"))
            if returncode == 0:
                break
            if not candidates and fallback is not None and fallback[1](step):
                candidates, fallback = [fallback[0]], None
        step = dict(step, headers=header_set, seconds=round(time.monotonic() - started, 3))
        if len(tried) > 1:
            step["attempts"] = tried
        return returncode, output, step

    def _build(self, extension, key, name, entry, verbose):
        toolchain = self.toolchain
        build_dir = os.path.join(self.work_dir, f"torch_cuda_build_{name}")
        os.makedirs(build_dir, exist_ok=True)
        header_sets = self.header_flags()
        preferred = [h for h in ("lean", "trimmed") if h in header_sets]
        arch = toolchain.cuda_arch
        # The name reaches load_inline's main.cpp as KEVAL_TORCH_EXTENSION_NAME (a macro a
        # precompiled header never sees); load()'s files and the CUDA units get torch's macro.
        name_defines = [f"-DKEVAL_TORCH_EXTENSION_NAME={name}"]
        user_includes = [f"-I{p}" for p in extension.extra_include_paths]
        torch_includes = [f"-I{p}" for p in toolchain.include_paths]
        # main.cpp uses a precompiled header when one was prepared for its flags.
        trimmed_cxx_flags = self._cxx_flags("trimmed", extension)
        pch_dir = self._pch_dir(trimmed_cxx_flags)
        has_pch = os.path.exists(os.path.join(pch_dir, PCH_HEADER + ".gch"))

        def cuda_attempt(file_name, text):
            def attempt(header_set):
                unit_dir = os.path.join(build_dir, header_set)
                os.makedirs(unit_dir, exist_ok=True)
                source = _write(unit_dir, file_name, text)
                command = ([toolchain.nvcc, "-c", source, "-o", source + ".o", "-std=c++17",
                            f"-gencode=arch=compute_{arch},code=sm_{arch}",
                            "-ccbin", toolchain.cxx, "--compiler-options", "-fPIC"] +
                           TORCH_NVCC_FLAGS + [f"-DTORCH_EXTENSION_NAME={name}"] +
                           toolchain.defines + user_includes + header_sets[header_set] +
                           torch_includes + extension.extra_cuda_cflags)
                returncode, output, seconds, mode = nvcc_pipeline.compile_cuda(command,
                                                                               unit_dir)
                return returncode, "$ " + " ".join(command) + "\n" + output, {
                    "tool": "nvcc", "file": source, "object": source + ".o",
                    "seconds": seconds, "mode": mode}
            return attempt

        def cpp_attempt(file_name, text):
            def attempt(header_set):
                unit_dir = os.path.join(build_dir, header_set)
                os.makedirs(unit_dir, exist_ok=True)
                source = _write(unit_dir, file_name, text)
                if header_set == "pch":
                    flags = [f"-I{pch_dir}", "-Winvalid-pch"] + trimmed_cxx_flags
                else:
                    flags = self._cxx_flags(header_set, extension)
                command = [toolchain.cxx, "-c", source, "-o", source + ".o"] + flags + \
                    name_defines + ([] if CPP_PRELUDE in text else
                                    [f"-DTORCH_EXTENSION_NAME={name}"])
                returncode, output, seconds = _run(command, unit_dir)
                return returncode, "$ " + " ".join(command) + "\n" + output, {
                    "tool": os.path.basename(toolchain.cxx), "file": source,
                    "object": source + ".o", "seconds": seconds}
            return attempt

        def through_trimmed(step):
            return _includes_trimmed(step, header_sets["trimmed"][0])

        # Every translation unit at once (the job's build is the only work before its grant).
        pool = ThreadPoolExecutor(len(extension.cuda_units) + len(extension.cpp_units) or 1)
        with pool:
            futures = []
            for file_name, text in extension.cuda_units:
                futures.append(pool.submit(self._compile_unit, cuda_attempt(file_name, text),
                                           preferred, ("full", through_trimmed)))
            for file_name, text in extension.cpp_units:
                if CPP_PRELUDE not in text:  # load()'s files: as torch compiles them
                    futures.append(pool.submit(self._compile_unit,
                                               cpp_attempt(file_name, text), ["full"]))
                    continue
                futures.append(pool.submit(
                    self._compile_unit, cpp_attempt(file_name, text),
                    ["pch"] if has_pch else preferred, ("full", lambda step: True)))
            results = [f.result() for f in futures]
        steps, objects = [], []
        for returncode, output, step in results:
            if verbose and output:
                print(output, end="", flush=True)
            objects.append(step.pop("object"))
            steps.append(step)
        for returncode, output, step in results:
            if returncode != 0:
                raise BuildFailed(extension.name, step["tool"], returncode, output, steps)
        library_name = f"{name}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"
        library = os.path.join(build_dir, library_name)
        link = [toolchain.cxx, "-shared", "-o", library] + objects + [
            f"-L{toolchain.torch_lib}", f"-Wl,-rpath,{toolchain.torch_lib}", "-lc10", "-ltorch",
            "-ltorch_cpu", "-ltorch_python"]
        if extension.with_cuda:
            cuda_lib = os.path.join(toolchain.cuda_home, "lib64")
            link += ["-lc10_cuda", "-ltorch_cuda", f"-L{cuda_lib}", "-lcudart"]
        link += extension.extra_ldflags
        returncode, output, seconds = _run(link, build_dir)
        if verbose and output:
            print(output, end="", flush=True)
        steps.append({"tool": "link", "seconds": seconds})
        if returncode != 0:
            raise BuildFailed(extension.name, "link", returncode,
                              "$ " + " ".join(link) + "\n" + output, steps)
        _publish(library, entry, key)
        library, why = verify_entry(entry, key)
        if library is None:
            raise RuntimeError(f"the cache entry just written is unusable: {why}")
        return library, steps


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


def _includes_trimmed(step, trimmed_include):
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


def _write(build_dir, file_name, text):
    path = os.path.join(build_dir, file_name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def _run(command, cwd):
    started = time.monotonic()
    done = subprocess.run(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace")
    return done.returncode, done.stdout, round(time.monotonic() - started, 3)


def _publish(library, entry, key):
    """Copies the library into a fresh directory next to the entry and renames it into place:
    readers see either no entry or a complete one. Called with the key's lock held."""
    staging = f"{entry}.tmp-{uuid.uuid4().hex}"
    os.makedirs(staging)
    target = os.path.join(staging, os.path.basename(library))
    shutil.copy2(library, target)
    manifest = {"format": CACHE_FORMAT, "key": key, "library": os.path.basename(library),
                "sha256": _sha256_of(target), "created": time.time()}
    with open(os.path.join(staging, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(manifest, f)
        f.flush()
        os.fsync(f.fileno())
    if os.path.exists(entry):  # a refused (corrupt) entry: moved aside, then removed
        trash = f"{entry}.bad-{uuid.uuid4().hex}"
        os.rename(entry, trash)
        shutil.rmtree(trash, ignore_errors=True)
    os.rename(staging, entry)


def _import_extension(name, library):
    import importlib.machinery
    import importlib.util

    if name in sys.modules:  # the same kernel loaded twice in one job
        return sys.modules[name]
    loader = importlib.machinery.ExtensionFileLoader(name, library)
    spec = importlib.util.spec_from_file_location(name, library, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[name] = module
    return module
