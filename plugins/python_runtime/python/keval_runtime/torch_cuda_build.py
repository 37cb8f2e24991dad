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
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from . import nvcc_pipeline

# Bumped when the layout of an entry or the way translation units are generated changes.
CACHE_FORMAT = 1
MANIFEST = "manifest.json"

# What torch's load_inline puts at the top of each generated file (torch/utils/cpp_extension.py).
# main.cpp includes torch/extension.h through a header of keval's own, which the builder
# precompiles once per toolchain and flags (PCH_HEADER below): parsing torch/extension.h is most
# of a cold build's host-compiler time.
PCH_HEADER = "keval_torch_extension.h"
CPP_PRELUDE = f'#include "{PCH_HEADER}"\n'
CUDA_PRELUDE = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"

# What a unit gets for #include <torch/extension.h> on the first attempt. torch's header is all of
# the C++ frontend (nn, optim, data, jit, serialization) plus the Python bindings; parsing it is
# most of a cold build (nvcc parses it twice, once per front end). Kernels and their host
# wrappers use tensors, factories, TORCH_CHECK and AT_DISPATCH: torch/types.h. The bindings in
# main.cpp need pybind11 and torch's tensor casters. A unit that needs more fails to compile with
# this and is compiled again with torch's header, so what builds is what torch would build.
TRIMMED_EXTENSION_H = """// keval: torch/extension.h trimmed for a first compile attempt (torch_cuda_build.py)
#pragma once
#include <torch/types.h>
#ifndef __CUDACC__
#include <torch/csrc/utils/pybind.h>
#endif
"""


class BuildFailed(Exception):
    """A compiler or the linker failed; ``output`` is everything it printed, in full."""

    def __init__(self, name, tool, returncode, output):
        super().__init__(f"building the extension '{name}' failed: {tool} "
                         f"exited with status {returncode}")
        self.name = name
        self.tool = tool
        self.returncode = returncode
        self.output = output


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
            # Seed 000's TORCH_CUDA form launches the kernel from cpp_sources, which no host
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

        self.cuda_arch = int(cuda_arch)
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


def _version_of(tool):
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

    def _trimmed_headers(self):
        """A directory whose torch/extension.h is TRIMMED_EXTENSION_H (written once, in place by
        rename, under a name that changes whenever its text does)."""
        digest = hashlib.sha256(TRIMMED_EXTENSION_H.encode("utf-8")).hexdigest()[:16]
        directory = os.path.join(self.cache_dir, "trimmed_headers", digest)
        if os.path.exists(os.path.join(directory, "torch", "extension.h")):
            return directory
        staging = f"{directory}.tmp-{uuid.uuid4().hex}"
        os.makedirs(os.path.join(staging, "torch"))
        _write(os.path.join(staging, "torch"), "extension.h", TRIMMED_EXTENSION_H)
        try:
            os.rename(staging, directory)
        except OSError:  # another job put the same text there first
            shutil.rmtree(staging, ignore_errors=True)
        return directory

    def _precompiled_header(self, cxx_flags, variant):
        """The directory holding keval_torch_extension.h and its precompiled form for these
        flags and header variant ("trimmed": compiled with the trimmed torch/extension.h first on
        the include path, "full": torch's), building it once under the same lock-and-rename
        discipline as the entries. It lives in the cache, keyed by the toolchain and the flags, so
        a cold kernel build on a machine that has built any kernel before skips parsing torch."""
        toolchain = self.toolchain
        material = json.dumps({"format": CACHE_FORMAT, "toolchain": toolchain.key_parts,
                               "flags": cxx_flags, "variant": variant}, sort_keys=True)
        key = hashlib.sha256(material.encode("utf-8")).hexdigest()
        pch_dir = os.path.join(self.cache_dir, "pch", key)
        if os.path.exists(os.path.join(pch_dir, "complete")):
            return pch_dir
        os.makedirs(os.path.dirname(pch_dir), exist_ok=True)
        with open(pch_dir + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if os.path.exists(os.path.join(pch_dir, "complete")):
                return pch_dir
            staging = f"{pch_dir}.tmp-{uuid.uuid4().hex}"
            os.makedirs(staging)
            header = _write(staging, PCH_HEADER, "#include <torch/extension.h>\n")
            gch_staged = os.path.join(staging, PCH_HEADER + ".gch")
            command = [toolchain.cxx, "-x", "c++-header", header, "-o", gch_staged] + cxx_flags
            returncode, output, seconds = _run(command, staging, False)
            if returncode != 0 and os.path.exists(gch_staged):
                # Still usable: without the .gch the header is compiled as ordinary source.
                os.remove(gch_staged)
            _write(staging, "complete", json.dumps({"seconds": seconds, "status": returncode}))
            if os.path.exists(pch_dir):
                shutil.rmtree(pch_dir, ignore_errors=True)
            os.rename(staging, pch_dir)
        return pch_dir

    def _compile_cuda_unit(self, command, trimmed_include, build_dir, verbose):
        """nvcc on one unit: first with the trimmed torch/extension.h, then, only if that failed
        and the trimmed header was part of the unit, with torch's own. Returns (returncode,
        output, step record)."""
        full = [a for a in command if a != trimmed_include]
        returncode, output, seconds, mode = nvcc_pipeline.compile_cuda(command, build_dir)
        used = _includes_trimmed(build_dir, command[2], trimmed_include)
        step = {"tool": "nvcc", "file": command[2], "seconds": seconds, "mode": mode,
                "torch_extension_h": "trimmed" if used else "not included"}
        if returncode != 0 and used:
            first = seconds
            returncode, output, seconds, mode = nvcc_pipeline.compile_cuda(full, build_dir)
            step.update(seconds=round(first + seconds, 3), mode=mode,
                        torch_extension_h="torch's (the trimmed header was not enough: "
                                          f"{first} s)")
            command = full
        if verbose and output:
            print(output, end="", flush=True)
        return returncode, "$ " + " ".join(command) + "\n" + output, step

    def _compile_cpp_unit(self, file_name, text, build_dir, flags, verbose):
        """The host compiler on one unit. load_inline's main.cpp starts with CPP_PRELUDE and gets
        a precompiled header: the trimmed one, and torch's full one only when the unit does not
        compile with the trimmed (both are built once per toolchain and kept in the cache)."""
        toolchain = self.toolchain
        source = _write(build_dir, file_name, text)
        base = [toolchain.cxx, "-c", source, "-o", source + ".o"]
        if CPP_PRELUDE not in text:
            command = base + flags["plain"]
            returncode, output, seconds = _run(command, build_dir, verbose)
            return returncode, "$ " + " ".join(command) + "\n" + output, {
                "tool": os.path.basename(toolchain.cxx), "file": source, "seconds": seconds}
        started = time.monotonic()
        attempts = []
        for variant in ("trimmed", "full"):
            pch_flags = flags[variant]
            pch_dir = self._precompiled_header(pch_flags, variant)
            # The directory holding keval_torch_extension.h(.gch) first; without a usable .gch
            # g++ compiles that header, which includes torch's, as usual.
            command = base + [f"-I{pch_dir}", "-Winvalid-pch"] + pch_flags + flags["name"]
            returncode, output, seconds = _run(command, build_dir, False)
            attempts.append(f"{variant}: {seconds} s")
            if returncode == 0:
                break
        if verbose and output:
            print(output, end="", flush=True)
        return returncode, "$ " + " ".join(command) + "\n" + output, {
            "tool": os.path.basename(toolchain.cxx), "file": source,
            "seconds": round(time.monotonic() - started, 3),
            "torch_extension_h": "trimmed" if len(attempts) == 1 else
            "torch's (the trimmed header was not enough)", "attempts": attempts}

    def _build(self, extension, key, name, entry, verbose):
        toolchain = self.toolchain
        build_dir = os.path.join(self.work_dir, f"torch_cuda_build_{name}")
        os.makedirs(build_dir, exist_ok=True)
        trimmed_include = f"-I{self._trimmed_headers()}"
        user_includes = [f"-I{p}" for p in extension.extra_include_paths]
        torch_includes = [f"-I{p}" for p in toolchain.include_paths]
        arch = toolchain.cuda_arch

        def cxx_flags(trimmed):
            return (["-fPIC", "-std=c++17"] + toolchain.defines + user_includes +
                    ([trimmed_include] if trimmed else []) + torch_includes +
                    extension.extra_cflags)

        # The name reaches load_inline's main.cpp as KEVAL_TORCH_EXTENSION_NAME (a macro the
        # precompiled header never sees); load()'s files and the CUDA units get torch's macro.
        name_defines = [f"-DKEVAL_TORCH_EXTENSION_NAME={name}"]
        cpp_flags = {"trimmed": cxx_flags(True), "full": cxx_flags(False), "name": name_defines,
                     "plain": cxx_flags(False) + name_defines + [f"-DTORCH_EXTENSION_NAME={name}"]}
        objects = []
        # Every translation unit at once (the job's build is the only work before its grant).
        pool = ThreadPoolExecutor(len(extension.cuda_units) + len(extension.cpp_units) or 1)
        with pool:
            futures = []
            for file_name, text in extension.cuda_units:
                source = _write(build_dir, file_name, text)
                objects.append(source + ".o")
                command = [toolchain.nvcc, "-c", source, "-o", source + ".o", "-std=c++17",
                           f"-gencode=arch=compute_{arch},code=sm_{arch}",
                           "-ccbin", toolchain.cxx, "--compiler-options", "-fPIC",
                           # torch's flags for extensions (cpp_extension.COMMON_NVCC_FLAGS)
                           "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                           "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
                           "--expt-relaxed-constexpr", f"-DTORCH_EXTENSION_NAME={name}"
                           ] + toolchain.defines + user_includes + [trimmed_include] + \
                    torch_includes + extension.extra_cuda_cflags
                futures.append(pool.submit(self._compile_cuda_unit, command, trimmed_include,
                                           build_dir, verbose))
            for file_name, text in extension.cpp_units:
                objects.append(os.path.join(build_dir, file_name) + ".o")
                futures.append(pool.submit(self._compile_cpp_unit, file_name, text, build_dir,
                                           cpp_flags, verbose))
            results = [f.result() for f in futures]
        steps = []
        for returncode, output, step in results:
            steps.append(step)
            if returncode != 0:
                raise BuildFailed(extension.name, step["tool"], returncode, output)
        library_name = f"{name}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"
        library = os.path.join(build_dir, library_name)
        link = [toolchain.cxx, "-shared", "-o", library] + objects + [
            f"-L{toolchain.torch_lib}", f"-Wl,-rpath,{toolchain.torch_lib}", "-lc10", "-ltorch",
            "-ltorch_cpu", "-ltorch_python"]
        if extension.with_cuda:
            cuda_lib = os.path.join(toolchain.cuda_home, "lib64")
            link += ["-lc10_cuda", "-ltorch_cuda", f"-L{cuda_lib}", "-lcudart"]
        link += extension.extra_ldflags
        returncode, output, seconds = _run(link, build_dir, verbose)
        steps.append({"tool": "link", "seconds": seconds})
        if returncode != 0:
            raise BuildFailed(extension.name, "link", returncode,
                              "$ " + " ".join(link) + "\n" + output)
        _publish(library, entry, key)
        library, why = verify_entry(entry, key)
        if library is None:
            raise RuntimeError(f"the cache entry just written is unusable: {why}")
        return library, steps


def _includes_trimmed(build_dir, source, trimmed_include):
    """Whether nvcc's preprocessed output for ``source`` went through the trimmed header (its
    line markers name every file included). Without the kept stages (plain nvcc ran), assume
    it did."""
    keep_dir = os.path.join(build_dir, "nvcc_stages_" + os.path.basename(source))
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


def _run(command, cwd, verbose):
    started = time.monotonic()
    done = subprocess.run(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace")
    if verbose and done.stdout:
        print(done.stdout, end="", flush=True)
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
