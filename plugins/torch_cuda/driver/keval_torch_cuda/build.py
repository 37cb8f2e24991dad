"""keval's builder for torch C++/CUDA extensions (kernel_type "torch_cuda"): the orchestration.

It serves ``torch.utils.cpp_extension.load_inline`` and ``load`` for the submitted source (see
shim.py) and replaces torch's ninja build with one made for a single job:

  - only the granted GPU's architecture (``-gencode arch=compute_XY,code=sm_XY``);
  - translation units compiled in parallel (nvcc and the host compiler at once), each with the
    smallest header set that compiles it (headers.py), then one link;
  - a content-addressed cache (cache.py) keyed by everything that changes the binary: the
    extension (extension.py) and the toolchain (toolchain.py);
  - the module is named ``<name>_<key prefix>``, so two kernels that use the same ``name=`` are
    two different modules (torch's own cache would hand the second job the first one's build);
  - the build runs in the job's work directory and its result enters the cache by an atomic
    rename of a finished directory, checked before every use;
  - concurrent jobs building the same key serialise on a lock file: one builds, the others wait
    and load its entry;
  - main.cpp uses a precompiled torch/extension.h when the cache has one (precompiled_header.py).
"""
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from concurrent.futures import ThreadPoolExecutor

from keval_runtime import host_requests

from . import cache, headers, nvcc_pipeline, precompiled_header
from .extension import CPP_PRELUDE, Extension
from .toolchain import Toolchain

# Extension is re-exported: the shim imports it from here, with the builder.
__all__ = ["BuildFailed", "Builder", "Extension"]

# torch's flags for extensions' CUDA units (cpp_extension.COMMON_NVCC_FLAGS).
TORCH_NVCC_FLAGS = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
                    "--expt-relaxed-constexpr"]


class BuildFailed(Exception):
    """A compiler or the linker failed; ``output`` is everything it printed, in full.
    ``message``: the line the trusted worker's builder reported, for a build made there."""

    def __init__(self, name, tool, returncode, output, steps=(), message=None):
        super().__init__(message or f"building the extension '{name}' failed: {tool} "
                                    f"exited with status {returncode}")
        self.name = name
        self.tool = tool
        self.returncode = returncode
        self.output = output
        self.steps = list(steps)  # what ran, for the build record


class Builder:
    """Builds and caches extensions for one job; ``builds`` records what each call did."""

    def __init__(self, work_dir, cuda_arch, cache_dir=None, toolchain=None, shared_dirs=None):
        self.work_dir = work_dir
        self.cuda_arch = cuda_arch
        # Builds go into cache_dir; shared_dirs are caches this process may only read (a
        # candidate's view of the shared one: cache.cache_locations).
        if cache_dir is None:
            cache_dir, located_shared = cache.cache_locations()
            shared_dirs = located_shared if shared_dirs is None else shared_dirs
        self.cache_dir = cache_dir
        self.shared_dirs = list(shared_dirs or [])
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
        key = cache.cache_key(extension, toolchain.key_parts)
        name = cache.module_name(extension, key)
        entry = cache.entry_dir(self.cache_dir, key)
        record = {"name": extension.name, "module": name, "key": key, "entry": entry}
        if extension.notes:
            record["notes"] = list(extension.notes)
        library, why = None, None
        for shared in self.shared_dirs:  # entries enter by rename: no lock needed to read one
            library, _ = cache.verify_entry(cache.entry_dir(shared, key), key)
            if library is not None:
                record["entry"] = cache.entry_dir(shared, key)
                record["cache"] = "hit_shared"
                break
        if library is None:
            library, why = cache.verify_entry(entry, key)
            if library is not None:
                record["cache"] = "hit"
        if library is None and self.served_by_host(extension):
            library = self._build_by_host(extension, name, record)
        if library is None:
            with cache.key_lock(entry, key):  # one builder per key; the others wait here
                library, why_now = cache.verify_entry(entry, key)
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
        module = _import_extension(name, library)
        record["seconds"] = round(time.monotonic() - started, 3)
        self.builds.append(record)
        return module

    def served_by_host(self, extension):
        """Whether the trusted worker builds ``extension`` for this process: a runner that may
        not write the shared cache (a candidate's), for a load_inline-style request (units and
        flags only; load()'s include directories are in this runner's directory, which the
        builder cannot see)."""
        return (bool(self.shared_dirs) and host_requests.available() and
                not extension.extra_include_paths)

    def _build_by_host(self, extension, name, record):
        """The library the trusted worker built, or found built, for ``extension`` (core/worker/
        pipeline/extension_builds.hpp), copied into this job's directory; None when it could
        not (``record["host_build"]`` says why), and this process builds it itself. A failed
        build raises BuildFailed with the compiler's output, as one here would."""
        message = {"type": "build_request", "kind": "torch_cuda_extension", "module": name,
                   "toolchain": self.toolchain.key_parts, "extension": extension.wire()}
        reply, fds = host_requests.request(message, "build_reply")
        try:
            failed = reply.get("failed")
            if isinstance(failed, dict):
                failure = BuildFailed(extension.name, None, None, str(failed.get("output", "")),
                                      failed.get("steps") or [],
                                      message=str(failed.get("message", "")) or None)
                self.failure = failure
                record.update(cache="failed", by="keval", steps=failure.steps)
                self.builds.append(record)
                raise failure
            if reply.get("ok") is not True or len(fds) != 1:
                record["host_build"] = str(reply.get("unavailable") or reply.get("refused") or
                                           "the answer carried no library")
                return None
            record["cache"] = "reused" if reply.get("cache") == "reused" else "built"
            record["by"] = "keval"  # built apart from user code, kept for every job
            record["entry"] = reply.get("key")
            for field in ("steps", "not_kept"):
                if field in reply:
                    record[field] = reply[field]
            build_dir = os.path.join(self.work_dir or os.environ.get("TMPDIR") or "/tmp",
                                     f"torch_cuda_build_{name}")
            os.makedirs(build_dir, exist_ok=True)
            library = os.path.join(build_dir,
                                   name + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
            with os.fdopen(os.dup(fds[0]), "rb") as source, open(library, "wb") as target:
                source.seek(0)
                shutil.copyfileobj(source, target, 1 << 20)
            return library
        finally:
            for fd in fds:
                os.close(fd)

    def build_for_host(self, extension, module):
        """The trusted worker's builder (side "build"): builds ``extension`` as module
        ``module`` in this process's own cache and returns (the library's path, the steps)."""
        key = cache.cache_key(extension, self.toolchain.key_parts)
        entry = cache.entry_dir(self.cache_dir, key)
        with cache.key_lock(entry, key):
            return self._build(extension, key, module, entry, verbose=False)

    def header_flags(self):
        """{header set: the compiler flags selecting it} (headers.py), made once per builder."""
        if self._header_flags is None:
            # The shared cache's headers when it has them all: its precompiled headers are keyed
            # by these paths.
            for shared in self.shared_dirs:
                self._header_flags = headers.header_flags(shared, self.toolchain.include_paths,
                                                          create=False)
                if self._header_flags is not None:
                    break
            if self._header_flags is None:
                self._header_flags = headers.header_flags(self.cache_dir,
                                                          self.toolchain.include_paths)
        return self._header_flags

    def _cxx_flags(self, header_set, extension=None):
        toolchain = self.toolchain
        user_includes = [f"-I{p}" for p in extension.extra_include_paths] if extension else []
        return (["-fPIC", "-std=c++17"] + toolchain.defines + user_includes +
                self.header_flags()[header_set] + [f"-I{p}" for p in toolchain.include_paths] +
                (extension.extra_cflags if extension else []))

    def _pch_dir(self, cxx_flags):
        for shared in self.shared_dirs:
            pch_dir = precompiled_header.directory(shared, self.toolchain.key_parts, cxx_flags)
            if precompiled_header.usable(pch_dir):
                return pch_dir
        return precompiled_header.directory(self.cache_dir, self.toolchain.key_parts, cxx_flags)

    def prepare(self, wait=True):
        """Precompiles keval_torch_extension.h for the trimmed header set and no extra flags
        (KernelBench's load_inline calls) unless the cache has it or another process is
        building it; the torch_cuda type's prewarm calls this with ``wait=False``, which returns
        once the compiler started (precompiled_header.py says why). Returns "present", "being
        built", "started" or, with ``wait``, "built" or "failed"."""
        cxx_flags = self._cxx_flags("trimmed")
        pch_dir = self._pch_dir(cxx_flags)
        if self.shared_dirs and precompiled_header.usable(pch_dir):
            return "present"
        if self.shared_dirs and not wait:
            # A candidate's prewarm: a header only it could use is not worth a compiler in the
            # background; the reference side's prewarm fills the shared cache.
            return "left to the shared cache (read-only here)"
        return precompiled_header.precompile(self.toolchain.cxx, cxx_flags, pch_dir, wait)

    def _compile_unit(self, attempt, header_sets, fallback=None):
        """Compiles one unit with the first of ``header_sets`` that compiles, and with
        ``fallback[0]`` when none does and ``fallback[1](the failed step)`` says it may help.
        ``attempt(header set)`` returns (returncode, output, step). One after another, not
        side by side: the trimmed attempt running beside the lean one slows it down
        (plugins/torch_cuda/README.md, Measured), which every build would pay so that the units
        the lean set cannot compile save the lean attempt's time. Returns (returncode, output,
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
        has_pch = precompiled_header.usable(pch_dir)

        def cuda_attempt(file_name, text):
            def attempt(header_set):
                unit_dir = os.path.join(build_dir, header_set)
                os.makedirs(unit_dir, exist_ok=True)
                source = headers.write_file(unit_dir, file_name, text)
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
                source = headers.write_file(unit_dir, file_name, text)
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
            return headers.includes_trimmed(step, header_sets["trimmed"][0])

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
        cache.publish(library, entry, key)
        library, why = cache.verify_entry(entry, key)
        if library is None:
            raise RuntimeError(f"the cache entry just written is unusable: {why}")
        return library, steps


def _run(command, cwd):
    started = time.monotonic()
    done = subprocess.run(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace")
    return done.returncode, done.stdout, round(time.monotonic() - started, 3)


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
