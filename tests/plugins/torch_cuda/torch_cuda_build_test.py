"""CPU-only tests of the torch_cuda driver's builder and shim (no torch headers, no
compiler, no GPU): load_inline's argument forms, the cache key, the cache's refusal of corrupt
entries and its one-builder-per-key locking.

usage: torch_cuda_build_test.py <keval_runtime's parent directory> <keval_torch_cuda's parent
                               directory> [unittest options]
"""
import array
import fcntl
import json
import os
import socket
import struct
import sys
import tempfile
import threading
import types
import unittest

sys.path.insert(0, sys.argv.pop(1))
sys.path.insert(1, sys.argv.pop(1))

from keval_runtime import errors, host_requests  # noqa: E402
from keval_torch_cuda import build, cache, headers, launch_streams, served_build, shim  # noqa: E402
from keval_torch_cuda.extension import CUDA_PRELUDE, Extension  # noqa: E402

TOOLCHAIN = {"torch": "2.11.0", "torch_cuda": "13.0", "arch": 90, "cxx": "g++ 13.3",
             "nvcc": "13.0", "cxx11_abi": 1}


class RecordingBuilder:
    """Stands in for Builder: records what the shim asked for."""

    def __init__(self):
        self.loaded = []

    def load(self, extension, verbose=False):
        self.loaded.append((extension, verbose))
        return types.SimpleNamespace(extension=extension)


def fake_cpp_extension():
    def load_inline(name, cpp_sources, cuda_sources=None, functions=None):
        raise AssertionError("torch's load_inline must not run")

    def load(name, sources):
        raise AssertionError("torch's load must not run")

    return types.SimpleNamespace(load_inline=load_inline, load=load)


class ShimArguments(unittest.TestCase):
    def setUp(self):
        self.builder = RecordingBuilder()
        self.cpp_extension = shim.install(self.builder, fake_cpp_extension())

    def extension(self):
        return self.builder.loaded[-1][0]

    def test_strings_and_lists_are_the_same_extension(self):
        self.cpp_extension.load_inline(name="k", cpp_sources="int f();",
                                       cuda_sources="__global__ void g(){}", functions="f")
        as_strings = self.extension()
        self.cpp_extension.load_inline(name="k", cpp_sources=["int f();"],
                                       cuda_sources=["__global__ void g(){}"], functions=["f"])
        self.assertEqual(as_strings.describe(), self.extension().describe())

    def test_several_sources_are_joined_and_functions_bound(self):
        self.cpp_extension.load_inline("k", ["int f();", "int h();"], None, {"f": "doc f", "h": "h"})
        (name, main), = self.extension().cpp_units
        self.assertEqual(name, "main.cpp")
        self.assertIn("int f();\nint h();", main)
        self.assertIn('m.def("f", &f, "doc f");', main)
        self.assertIn("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)", main)
        self.assertEqual(self.extension().cuda_units, [])
        self.assertFalse(self.extension().with_cuda)

    def test_no_functions_leaves_binding_to_the_source(self):
        self.cpp_extension.load_inline("k", "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}")
        self.assertEqual(self.extension().cpp_units[0][1].count("PYBIND11_MODULE"), 1)

    def test_cuda_unit_gets_torchs_prelude(self):
        self.cpp_extension.load_inline("k", "", cuda_sources="__global__ void g(){}")
        (name, text), = self.extension().cuda_units
        self.assertEqual(name, "cuda.cu")
        self.assertTrue(text.startswith(CUDA_PRELUDE))
        self.assertTrue(self.extension().with_cuda)

    def test_flags_verbose_with_cuda_and_torch_only_arguments(self):
        self.cpp_extension.load_inline(
            "k", "", cuda_sources="x", extra_cflags=["-O3", ""], extra_cuda_cflags="-O3",
            extra_ldflags=[""], with_cuda=True, verbose=True, build_directory="/nowhere",
            with_pytorch_error_handling=False, keep_intermediates=False)
        extension, verbose = self.builder.loaded[-1]
        self.assertTrue(verbose)
        self.assertEqual(extension.extra_cflags, ["-O3"])  # KernelBench's [""] dropped
        self.assertEqual(extension.extra_cuda_cflags, ["-O3"])
        self.assertEqual(extension.extra_ldflags, [])

    def test_positional_arguments_in_torchs_order(self):
        self.cpp_extension.load_inline("k", "a", "b", ["f"], ["-DX"], ["-DY"], ["-lm"])
        extension = self.extension()
        self.assertEqual((extension.extra_cflags, extension.extra_cuda_cflags,
                          extension.extra_ldflags), (["-DX"], ["-DY"], ["-lm"]))

    def test_unknown_argument_is_a_type_error(self):
        with self.assertRaises(TypeError):
            self.cpp_extension.load_inline("k", "", not_an_argument=1)

    def test_load_reads_the_files(self):
        with tempfile.TemporaryDirectory() as d:
            cu, cpp = os.path.join(d, "k.cu"), os.path.join(d, "k.cpp")
            for path, text in ((cu, "__global__ void g(){}"), (cpp, "int f();")):
                with open(path, "w") as f:
                    f.write(text)
            self.cpp_extension.load(name="k", sources=[cpp, cu], verbose=False)
        extension = self.extension()
        self.assertEqual([t for _, t in extension.cuda_units], ["__global__ void g(){}"])
        self.assertEqual([t for _, t in extension.cpp_units], ["int f();"])
        self.assertIn(os.path.realpath(d), [os.path.realpath(p)
                                            for p in extension.extra_include_paths])


class CacheKey(unittest.TestCase):
    def key(self, cuda="__global__ void g(){}", toolchain=TOOLCHAIN, **flags):
        return cache.cache_key(Extension.inline("k", "int f();", cuda, ["f"], **flags),
                               toolchain)

    def test_stable(self):
        self.assertEqual(self.key(), self.key())
        # A pinned value: the key must not drift between runs or Python versions unnoticed.
        self.assertEqual(len(self.key()), 64)
        self.assertEqual(self.key(extra_cflags=["-O3"]), self.key(extra_cflags="-O3"))

    def test_everything_that_changes_the_binary_changes_the_key(self):
        base = self.key()
        self.assertNotEqual(base, self.key(cuda="__global__ void h(){}"))
        self.assertNotEqual(base, self.key(extra_cuda_cflags=["-lineinfo"]))
        self.assertNotEqual(base, self.key(extra_ldflags=["-lm"]))
        for part, value in (("arch", 80), ("torch", "2.10.0"), ("nvcc", "12.8"), ("cxx", "g++ 12")):
            self.assertNotEqual(base, self.key(toolchain={**TOOLCHAIN, part: value}), part)

    def test_same_name_different_kernels_are_different_modules(self):
        one = Extension.inline("shared", "int f();", "__global__ void a(){}", ["f"])
        two = Extension.inline("shared", "int f();", "__global__ void b(){}", ["f"])
        name_one = cache.module_name(one, cache.cache_key(one, TOOLCHAIN))
        name_two = cache.module_name(two, cache.cache_key(two, TOOLCHAIN))
        self.assertNotEqual(name_one, name_two)
        self.assertTrue(name_one.startswith("shared_") and name_one.isidentifier())
        odd = Extension.inline("9-bad name", "", None)
        self.assertTrue(cache.module_name(odd, "ab" * 32).isidentifier())


class IncludeDirectoriesInTheKey(unittest.TestCase):
    """load()'s files and extra_include_paths: their headers' content keys the build, their
    paths do not."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def job_dir(self, job, header="#define SCALE 2\n"):
        d = os.path.join(self.tmp.name, job)
        os.makedirs(os.path.join(d, "sub"))
        with open(os.path.join(d, "k.cu"), "w") as f:
            f.write('#include "sub/scale.cuh"\n__global__ void g(float* x){ x[0] *= SCALE; }')
        with open(os.path.join(d, "sub", "scale.cuh"), "w") as f:
            f.write(header)
        with open(os.path.join(d, "keval_torch_custom_%s.py" % job), "w") as f:
            f.write("# the job's own module: not a header")
        return d

    def load_key(self, d):
        extension = Extension.from_files("k", [os.path.join(d, "k.cu")])
        return cache.cache_key(extension, TOOLCHAIN), extension

    def test_the_same_files_in_two_jobs_share_a_build(self):
        one, _ = self.load_key(self.job_dir("job1"))
        two, _ = self.load_key(self.job_dir("job2"))
        self.assertEqual(one, two)

    def test_an_included_header_that_changed_changes_the_key(self):
        one, _ = self.load_key(self.job_dir("job1"))
        two, _ = self.load_key(self.job_dir("job2", header="#define SCALE 3\n"))
        self.assertNotEqual(one, two)

    def test_keval_build_directories_do_not_enter_the_key(self):
        d = self.job_dir("job1")
        before, _ = self.load_key(d)
        os.makedirs(os.path.join(d, "torch_cuda_build_k_0123"))
        with open(os.path.join(d, "torch_cuda_build_k_0123", "cuda.cu"), "w") as f:
            f.write("// generated by an earlier call")
        self.assertEqual(before, self.load_key(d)[0])

    def test_an_extra_include_path_outside_the_job_is_keyed_by_content(self):
        shared = os.path.join(self.tmp.name, "shared")
        os.makedirs(shared)
        header = os.path.join(shared, "h.cuh")

        def key():
            return cache.cache_key(Extension.inline(
                "k", "int f();", '#include "h.cuh"', ["f"], extra_include_paths=[shared]),
                TOOLCHAIN)

        with open(header, "w") as f:
            f.write("#define N 1\n")
        first = key()
        with open(header, "w") as f:
            f.write("#define N 2\n")
        self.assertNotEqual(first, key())

    def test_a_directory_too_large_to_fingerprint_is_never_shared(self):
        d = self.job_dir("job1")
        limit = cache.FINGERPRINT_MAX_FILES
        cache.FINGERPRINT_MAX_FILES = 1
        try:
            one, extension = self.load_key(d)
            two, _ = self.load_key(d)
        finally:
            cache.FINGERPRINT_MAX_FILES = limit
        self.assertNotEqual(one, two)
        self.assertTrue(any("not reused" in note for note in extension.notes), extension.notes)


class LeanHeaders(unittest.TestCase):
    """The lean header set is torch's own files less exactly the lines LEAN_DROPS names."""

    def test_drops_exactly_the_named_lines_from_the_first_copy_on_the_path(self):
        with tempfile.TemporaryDirectory() as tmp:
            first, second = os.path.join(tmp, "a"), os.path.join(tmp, "b")
            types_h = ("#pragma once\n#include <ATen/ATen.h>\n"
                       "#include <ATen/core/dispatch/Dispatcher.h>\n#include <torch/library.h>\n"
                       "namespace torch { using namespace at; }\n")
            aten_h = "#pragma once\n#include <ATen/Context.h>\n#include <ATen/Functions.h>\n"
            for directory, relative, text in ((first, "torch/types.h", types_h),
                                              (second, "ATen/ATen.h", aten_h),
                                              (second, "torch/types.h", "not this copy\n")):
                os.makedirs(os.path.join(directory, os.path.dirname(relative)), exist_ok=True)
                with open(os.path.join(directory, relative), "w") as f:
                    f.write(text)
            lean = headers.lean_headers([first, second])
        self.assertEqual(lean["torch/types.h"], "#pragma once\n#include <ATen/ATen.h>\n"
                         "namespace torch { using namespace at; }\n")
        self.assertEqual(lean["ATen/ATen.h"], "#pragma once\n#include <ATen/Context.h>\n")

    def test_a_torch_without_those_lines_has_no_lean_set(self):
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "torch"))
            with open(os.path.join(tmp, "torch", "types.h"), "w") as f:
                f.write("#pragma once\n#include <ATen/ATen.h>\n")
            self.assertEqual(headers.lean_headers([tmp]), {})


class HeaderSetOrder(unittest.TestCase):
    """Builder._compile_unit: header sets are tried in order until one compiles; the fallback
    only after all failed, and only when it may help."""

    def setUp(self):
        self.builder = build.Builder("/nonexistent", 90,
                                     toolchain=types.SimpleNamespace(key_parts=TOOLCHAIN))

    def attempt(self, outcomes, tried):
        def attempt(header_set):
            tried.append(header_set)
            return outcomes[header_set], f"output of {header_set}", {"tool": "nvcc",
                                                                     "seconds": 0.5}
        return attempt

    def test_the_first_set_that_compiles_is_used_and_no_other_runs(self):
        tried = []
        rc, output, step = self.builder._compile_unit(
            self.attempt({"lean": 0, "trimmed": 0}, tried), ["lean", "trimmed"],
            ("full", lambda step: True))
        self.assertEqual((rc, tried, step["headers"]), (0, ["lean"], "lean"))
        self.assertNotIn("attempts", step)

    def test_a_set_that_does_not_compile_gives_way_to_the_next(self):
        tried = []
        rc, output, step = self.builder._compile_unit(
            self.attempt({"lean": 1, "trimmed": 0}, tried), ["lean", "trimmed"])
        self.assertEqual((rc, output, step["headers"]), (0, "output of trimmed", "trimmed"))
        self.assertEqual(step["attempts"], ["lean: 0.5 s (did not compile)", "trimmed: 0.5 s"])

    def test_fallback_only_when_every_set_failed_and_it_may_help(self):
        outcomes = {"lean": 1, "trimmed": 1, "full": 0}
        tried = []
        rc, output, step = self.builder._compile_unit(
            self.attempt(outcomes, tried), ["lean", "trimmed"], ("full", lambda step: True))
        self.assertEqual((rc, tried, step["headers"]), (0, ["lean", "trimmed", "full"], "full"))
        tried = []
        rc, output, step = self.builder._compile_unit(
            self.attempt(outcomes, tried), ["lean", "trimmed"], ("full", lambda step: False))
        self.assertEqual((rc, output, tried), (1, "output of trimmed", ["lean", "trimmed"]))
        outcomes["full"] = 1
        rc, output, step = self.builder._compile_unit(
            self.attempt(outcomes, []), ["lean", "trimmed"], ("full", lambda step: True))
        self.assertEqual((rc, output, len(step["attempts"])), (1, "output of full", 3))


class PrecompiledHeader(unittest.TestCase):
    """Builder.prepare with a stand-in compiler (a script that writes its -o file)."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.compiler = os.path.join(self.tmp.name, "fake-c++")

    def tearDown(self):
        self.tmp.cleanup()

    def builder(self, body, cache_name="cache", shared_dirs=None):
        with open(self.compiler, "w") as f:
            f.write("#!/bin/sh\n" + body)
        os.chmod(self.compiler, 0o755)
        toolchain = types.SimpleNamespace(key_parts=TOOLCHAIN, cxx=self.compiler, defines=[],
                                          include_paths=[])
        return build.Builder(None, None, cache_dir=os.path.join(self.tmp.name, cache_name),
                             toolchain=toolchain, shared_dirs=shared_dirs)

    WRITE_OUTPUT = 'while [ "$1" != -o ]; do shift; done; echo pch > "$2"\n'

    def test_a_candidate_uses_the_shared_header_and_never_builds_one_there(self):
        shared = os.path.join(self.tmp.name, "cache")
        candidate = self.builder(self.WRITE_OUTPUT, "private", [shared])
        # Nothing shared yet: a candidate's prewarm starts no compiler.
        self.assertEqual(candidate.prepare(wait=False), "left to the shared cache (read-only here)")
        self.assertFalse(os.path.exists(shared))
        self.assertEqual(self.builder(self.WRITE_OUTPUT).prepare(), "built")  # the reference's
        candidate = self.builder(self.WRITE_OUTPUT, "private", [shared])
        self.assertEqual(candidate.prepare(wait=False), "present")
        pch = candidate._pch_dir(candidate._cxx_flags("trimmed"))
        self.assertTrue(pch.startswith(shared + os.sep), pch)  # its headers are the shared ones
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "private", "pch")))

    def test_built_once_then_present(self):
        builder = self.builder(self.WRITE_OUTPUT)
        self.assertEqual(builder.prepare(), "built")
        self.assertEqual(builder.prepare(), "present")
        pch = builder._pch_dir(builder._cxx_flags("trimmed"))
        with open(os.path.join(pch, headers.PCH_HEADER + ".gch")) as f:
            self.assertEqual(f.read(), "pch\n")
        self.assertEqual(sorted(n for n in os.listdir(os.path.dirname(pch))
                                if not n.endswith(".lock")), [os.path.basename(pch)])

    def test_a_compiler_failure_leaves_no_header_and_its_output(self):
        builder = self.builder('echo "no such header" >&2; exit 1\n')
        self.assertEqual(builder.prepare(), "failed")
        pch = builder._pch_dir(builder._cxx_flags("trimmed"))
        self.assertFalse(os.path.exists(os.path.join(pch, headers.PCH_HEADER + ".gch")))
        with open(os.path.join(pch, "log")) as f:
            self.assertIn("no such header", f.read())

    def test_in_the_background_it_holds_the_lock_until_done(self):
        gate = os.path.join(self.tmp.name, "gate")
        os.mkfifo(gate)
        # The compiler blocks reading the fifo until the test writes to it.
        builder = self.builder(f"read line < {gate}\n" + self.WRITE_OUTPUT)
        try:
            self.assertEqual(builder.prepare(wait=False), "started")
            self.assertEqual(builder.prepare(wait=False), "being built")
        finally:
            with open(gate, "w") as f:  # never leaves the detached stand-in waiting
                f.write("go\n")
        pch = builder._pch_dir(builder._cxx_flags("trimmed"))
        with open(pch + ".lock") as lock:  # released when the detached build ends
            fcntl.flock(lock, fcntl.LOCK_EX)
        self.assertEqual(builder.prepare(), "present")
        self.assertTrue(os.path.exists(os.path.join(pch, headers.PCH_HEADER + ".gch")))


class FakeBuilder(build.Builder):
    """A Builder whose compile step writes a stand-in library and whose import returns its
    path; counts the builds so tests can see what the cache did."""

    def __init__(self, work_dir, cache_dir, shared_dirs=None):
        super().__init__(work_dir, 90, cache_dir=cache_dir,
                         toolchain=types.SimpleNamespace(key_parts=TOOLCHAIN),
                         shared_dirs=shared_dirs)
        self.compiles = 0
        self.started = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def _build(self, extension, key, name, entry, verbose):
        self.compiles += 1
        self.started.set()
        self.release.wait(10)
        library = os.path.join(self.work_dir, name + ".so")
        os.makedirs(self.work_dir, exist_ok=True)
        with open(library, "wb") as f:
            f.write(b"\x7fELF stand-in " + key.encode())
        cache.publish(library, entry, key)
        path, why = cache.verify_entry(entry, key)
        assert path is not None, why
        return path, []


class Cache(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.cache = os.path.join(self.tmp.name, "cache")
        self.extension = Extension.inline("k", "int f();", "__global__ void g(){}", ["f"])
        self.imported = build._import_extension
        build._import_extension = lambda name, library: library

    def tearDown(self):
        build._import_extension = self.imported
        self.tmp.cleanup()

    def builder(self, job):
        return FakeBuilder(os.path.join(self.tmp.name, job), self.cache)

    def test_miss_then_hit(self):
        first = self.builder("job1")
        first.load(self.extension)
        second = self.builder("job2")
        second.load(self.extension)
        self.assertEqual((first.builds[0]["cache"], second.builds[0]["cache"]), ("miss", "hit"))
        self.assertEqual(second.compiles, 0)

    def test_corrupt_entry_is_refused_and_rebuilt(self):
        first = self.builder("job1")
        library = first.load(self.extension)
        with open(library, "r+b") as f:  # a flipped byte, as a torn or damaged write leaves
            f.write(b"X")
        entry = first.builds[0]["entry"]
        self.assertIsNone(cache.verify_entry(entry, first.builds[0]["key"])[0])
        second = self.builder("job2")
        second.load(self.extension)
        self.assertEqual(second.builds[0]["cache"], "rebuilt")
        self.assertEqual(second.builds[0]["refused_entry"], "library checksum mismatch")
        self.assertIsNotNone(cache.verify_entry(entry, first.builds[0]["key"])[0])

    def test_missing_manifest_or_half_written_entry_is_never_used(self):
        first = self.builder("job1")
        first.load(self.extension)
        entry = first.builds[0]["entry"]
        os.remove(os.path.join(entry, cache.MANIFEST))
        second = self.builder("job2")
        second.load(self.extension)
        self.assertEqual(second.builds[0]["cache"], "rebuilt")
        self.assertEqual(second.compiles, 1)

    def test_concurrent_jobs_build_a_key_once(self):
        first, second = self.builder("job1"), self.builder("job2")
        first.release.clear()
        thread = threading.Thread(target=first.load, args=(self.extension,))
        thread.start()
        self.assertTrue(first.started.wait(10))
        waiter = threading.Thread(target=second.load, args=(self.extension,))
        waiter.start()
        first.release.set()
        thread.join(20)
        waiter.join(20)
        self.assertEqual(first.compiles + second.compiles, 1)
        self.assertEqual(second.builds[0]["cache"], "hit_after_wait")

    def test_a_candidate_uses_the_shared_cache_and_writes_only_its_own(self):
        """A candidate's runner (KEVAL_CACHE_READ_ONLY=1) may load what the reference side
        built, but what it builds stays in its own cache: nothing it writes reaches another
        job's load (issue 11: a planted entry would run in every later build of its key)."""
        reference = self.builder("ref")
        reference.load(self.extension)

        def snapshot(root):
            found = {}
            for directory, _, names in os.walk(root):
                for name in names:
                    path = os.path.join(directory, name)
                    with open(path, "rb") as f:
                        found[os.path.relpath(path, root)] = f.read()
            return found

        shared_before = snapshot(self.cache)
        private = os.path.join(self.tmp.name, "candidate-cache")
        candidate = FakeBuilder(os.path.join(self.tmp.name, "cand"), private, [self.cache])
        candidate.load(self.extension)
        self.assertEqual(candidate.builds[0]["cache"], "hit_shared")
        self.assertEqual(candidate.compiles, 0)
        other = Extension.inline("k2", "int f();", "__global__ void h(){}", ["f"])
        candidate.load(other)
        self.assertEqual(candidate.builds[1]["cache"], "miss")
        self.assertTrue(candidate.builds[1]["entry"].startswith(private))
        self.assertEqual(snapshot(self.cache), shared_before)
        # A later reference job does not find the candidate's build: it builds its own.
        later = self.builder("ref2")
        later.load(other)
        self.assertEqual((later.builds[0]["cache"], later.compiles), ("miss", 1))

    def test_a_read_only_view_is_located_from_the_environment(self):
        names = ("KEVAL_CACHE_DIR", "KEVAL_CACHE_READ_ONLY", "KEVAL_PRIVATE_CACHE_DIR")
        saved = {k: os.environ.pop(k, None) for k in names}
        try:
            os.environ["KEVAL_CACHE_DIR"] = "/k"
            self.assertEqual(cache.cache_locations(), ("/k/torch_cuda", []))
            os.environ["KEVAL_CACHE_READ_ONLY"] = "1"
            os.environ["KEVAL_PRIVATE_CACHE_DIR"] = "/runner/.keval-cache"
            self.assertEqual(cache.cache_locations(),
                             ("/runner/.keval-cache/torch_cuda", ["/k/torch_cuda"]))
            builder = build.Builder(None, None)
            self.assertEqual((builder.cache_dir, builder.shared_dirs),
                             ("/runner/.keval-cache/torch_cuda", ["/k/torch_cuda"]))
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None)
                if v is not None:
                    os.environ[k] = v

    def test_cache_location(self):
        saved = {k: os.environ.pop(k, None) for k in ("KEVAL_CACHE_DIR", "XDG_CACHE_HOME")}
        try:
            os.environ["XDG_CACHE_HOME"] = "/x"
            self.assertEqual(cache.cache_root(), "/x/keval/torch_cuda")
            os.environ["KEVAL_CACHE_DIR"] = "/k"
            self.assertEqual(cache.cache_root(), "/k/torch_cuda")
            del os.environ["KEVAL_CACHE_DIR"], os.environ["XDG_CACHE_HOME"]
            self.assertEqual(cache.cache_root(),
                             os.path.expanduser("~/.cache/keval/torch_cuda"))
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None)
                if v is not None:
                    os.environ[k] = v



class FakeTrustedWorker:
    """The trusted worker's end of a runner's channel (a socketpair), answering one
    build_request with ``answer(message) -> (reply dict, library bytes or None)``; the message
    it got is kept in ``asked``."""

    def __init__(self, answer):
        self.ours, theirs = socket.socketpair()
        self.saved = os.environ.get("KEVAL_RUNNER_CHANNEL_FD")
        self.theirs = theirs
        os.environ["KEVAL_RUNNER_CHANNEL_FD"] = str(theirs.fileno())
        self.answer = answer
        self.asked = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            header = self.ours.recv(8, socket.MSG_WAITALL)
            if len(header) < 8:
                return
            (length,) = struct.unpack(">I", header[4:])
            body = self.ours.recv(length, socket.MSG_WAITALL)
            message = json.loads(body)
            self.asked.append(message)
            reply, library = self.answer(message)
            payload = json.dumps(dict(reply, v=1)).encode()
            frame = b"KEV1" + struct.pack(">I", len(payload)) + payload
            if library is None:
                self.ours.sendall(frame)
                continue
            fd = os.memfd_create("library")
            os.write(fd, library)
            self.ours.sendmsg([frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                         array.array("i", [fd]).tobytes())])
            os.close(fd)

    def close(self):
        self.theirs.close()
        self.ours.shutdown(socket.SHUT_RDWR)
        self.thread.join(10)
        self.ours.close()
        os.environ.pop("KEVAL_RUNNER_CHANNEL_FD", None)
        if self.saved is not None:
            os.environ["KEVAL_RUNNER_CHANNEL_FD"] = self.saved


class BuiltByTheTrustedWorker(unittest.TestCase):
    """A candidate's runner (the shared cache read-only) asks the trusted worker for what the
    caches do not have (core/worker/pipeline/extension_builds.hpp) instead of building it in the
    process that runs user code, whose builds no other job may use."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.shared = os.path.join(self.tmp.name, "shared")
        self.extension = Extension.inline("k", "int f();",
                                          "__global__ void g(){}\nvoid f(){ g<<<1, 1>>>(); }",
                                          ["f"])
        self.imported = build._import_extension
        build._import_extension = lambda name, library: library
        self.worker = None

    def tearDown(self):
        build._import_extension = self.imported
        if self.worker is not None:
            self.worker.close()
        self.tmp.cleanup()

    def candidate(self):
        return FakeBuilder(os.path.join(self.tmp.name, "cand"),
                           os.path.join(self.tmp.name, "private"), [self.shared])

    def test_a_miss_is_built_by_keval_and_loaded_from_its_descriptor(self):
        self.worker = FakeTrustedWorker(lambda m: ({"type": "build_reply", "ok": True,
                                                    "module": m["module"], "cache": "built",
                                                    "key": "k" * 64, "steps": [{"tool": "nvcc"}]},
                                                   b"\x7fELF built by keval"))
        candidate = self.candidate()
        library = candidate.load(self.extension)
        with open(library, "rb") as f:
            self.assertEqual(f.read(), b"\x7fELF built by keval")
        self.assertTrue(library.startswith(candidate.work_dir))
        self.assertEqual(candidate.compiles, 0)
        record = candidate.builds[0]
        self.assertEqual((record["cache"], record["by"], record["steps"]),
                         ("built", "keval", [{"tool": "nvcc"}]))
        asked, = self.worker.asked
        self.assertEqual((asked["type"], asked["kind"], asked["module"]),
                         ("build_request", "torch_cuda_extension", record["module"]))
        self.assertEqual(asked["toolchain"], TOOLCHAIN)
        self.assertEqual(asked["extension"], self.extension.wire())

    def test_a_failed_build_is_the_candidates_compile_error_with_the_compilers_output(self):
        self.worker = FakeTrustedWorker(lambda m: ({"type": "build_reply", "ok": False,
                                                    "failed": {"message": "nvcc exited with 1",
                                                               "output": "cuda.cu(3): error"}},
                                                   None))
        candidate = self.candidate()
        with self.assertRaises(build.BuildFailed) as raised:
            candidate.load(self.extension)
        self.assertEqual(str(raised.exception), "nvcc exited with 1")
        self.assertEqual(raised.exception.output, "cuda.cu(3): error")
        self.assertIs(candidate.failure, raised.exception)
        self.assertEqual((candidate.builds[0]["cache"], candidate.compiles), ("failed", 0))

    def test_when_keval_cannot_build_the_runner_builds_for_itself_and_says_why(self):
        self.worker = FakeTrustedWorker(lambda m: ({"type": "build_reply", "ok": False,
                                                    "unavailable": "the builder could not start"},
                                                   None))
        candidate = self.candidate()
        candidate.load(self.extension)
        self.assertEqual(candidate.compiles, 1)
        self.assertEqual(candidate.builds[0]["host_build"], "the builder could not start")
        self.assertTrue(candidate.builds[0]["entry"].startswith(candidate.cache_dir))

    def test_threads_that_load_at_once_ask_one_after_the_other(self):
        self.worker = FakeTrustedWorker(lambda m: ({"type": "build_reply", "ok": True,
                                                    "module": m["module"], "cache": "built"},
                                                   m["module"].encode()))
        candidate = self.candidate()
        extensions = [Extension.inline(f"k{i}", "int f();", f"__global__ void g{i}(){{}}", ["f"])
                      for i in range(4)]
        libraries = [None] * len(extensions)

        def load(i):
            libraries[i] = candidate.load(extensions[i])

        threads = [threading.Thread(target=load, args=(i,)) for i in range(len(extensions))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        self.assertEqual(len(self.worker.asked), len(extensions))
        for i, library in enumerate(libraries):
            with open(library, "rb") as f:  # each got its own answer, whole
                self.assertTrue(f.read().startswith(f"k{i}_".encode()))

    def test_an_answer_of_another_kind_is_an_error_not_a_library(self):
        self.worker = FakeTrustedWorker(lambda m: ({"type": "reply", "ok": True}, b"x"))
        with self.assertRaises(host_requests.HostRequestError):
            self.candidate().load(self.extension)

    def test_only_a_read_only_runner_asks_and_only_for_units_and_flags(self):
        os.environ["KEVAL_RUNNER_CHANNEL_FD"] = "1000"
        try:
            candidate = self.candidate()
            self.assertTrue(candidate.served_by_host(self.extension))
            reference = FakeBuilder(os.path.join(self.tmp.name, "ref"), self.shared)
            self.assertFalse(reference.served_by_host(self.extension))
            with_dir = Extension.inline("k", "int f();", None, ["f"],
                                        extra_include_paths=[self.tmp.name])
            self.assertFalse(candidate.served_by_host(with_dir))
        finally:
            del os.environ["KEVAL_RUNNER_CHANNEL_FD"]
        self.assertFalse(self.candidate().served_by_host(self.extension))

    def test_what_travels_is_the_same_extension_and_launches_are_not_rewritten_twice(self):
        wire = json.loads(json.dumps(self.extension.wire()))
        again = Extension.from_wire(wire)
        self.assertEqual(again.describe(), self.extension.describe())
        self.assertEqual(cache.cache_key(again, TOOLCHAIN),
                         cache.cache_key(self.extension, TOOLCHAIN))
        (_, unit), = again.cuda_units
        self.assertEqual(unit.count(launch_streams.STREAM_PRELUDE), 1)


class ServedBuild(unittest.TestCase):
    """The trusted worker's builder (side "build") builds nothing for a toolchain it is not."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.saved = served_build.Builder
        own = os.path.join(self.tmp.name, "own")

        class Stand(FakeBuilder):
            def __init__(self, work_dir, cuda_arch):
                super().__init__(work_dir, own)

        served_build.Builder = Stand

    def tearDown(self):
        served_build.Builder = self.saved
        self.tmp.cleanup()

    def request(self, toolchain):
        extension = Extension.inline("k", "int f();", None, ["f"])
        return json.dumps({"module": "k_0123456789abcdef", "toolchain": toolchain,
                           "extension": extension.wire()})

    def test_builds_under_the_requested_module_name_and_names_the_library(self):
        tmp = self.tmp.name
        built = served_build.build(self.request(TOOLCHAIN), tmp, 90)
        info = json.loads(built.info_json())["build"]
        self.assertEqual(info["module"], "k_0123456789abcdef")
        self.assertTrue(info["library"].startswith(os.path.join(tmp, "own")))
        self.assertTrue(os.path.isfile(info["library"]))

    def test_a_toolchain_other_than_its_own_is_refused(self):
        tmp = self.tmp.name
        with self.assertRaisesRegex(errors.UnsupportedError, "differs in torch"):
            served_build.build(self.request(dict(TOOLCHAIN, torch="9.9")), tmp, 90)
        self.assertFalse(os.path.exists(os.path.join(tmp, "own")))


class LaunchesOnTorchsCurrentStream(unittest.TestCase):
    """KernelBench's bare launches are put on torch's current stream, so a graph capture takes
    them and both sides of a compare are timed the same way (issue 13)."""

    S = launch_streams.STREAM_MACRO

    def rewrite(self, text):
        return launch_streams.put_launches_on_current_stream(text)

    def test_grid_and_block_get_no_shared_memory_and_the_stream(self):
        self.assertEqual(self.rewrite("k<<<blocks, threads>>>(a, b, n);"),
                         (f"k<<<blocks, threads, 0, {self.S}>>>(a, b, n);", 1))

    def test_shared_memory_is_kept(self):
        self.assertEqual(self.rewrite("k<<<g, b, smem>>>(x);"),
                         (f"k<<<g, b, smem, {self.S}>>>(x);", 1))

    def test_a_launch_that_names_a_stream_is_left_alone(self):
        text = "k<<<g, b, 0, at::cuda::getCurrentCUDAStream()>>>(x);"
        self.assertEqual(self.rewrite(text), (text, 0))

    def test_commas_inside_brackets_are_not_arguments(self):
        text = "k<<<dim3((n + 255) / 256, std::max(m, 1)), dim3(16, 16)>>>(x);"
        out, count = self.rewrite(text)
        self.assertEqual(count, 1)
        self.assertEqual(out, text.replace(")>>>", f"), 0, {self.S}>>>"))

    def test_comments_and_strings_are_not_touched(self):
        text = ('// k<<<a, b>>>(x);\n/* k<<<a, b>>> */ printf("<<<a, b>>>");\n'
                "char c = '<'; k<<<g, b>>>(x);")
        out, count = self.rewrite(text)
        self.assertEqual(count, 1)
        self.assertIn("// k<<<a, b>>>(x);", out)
        self.assertIn('printf("<<<a, b>>>")', out)
        self.assertIn(f"k<<<g, b, 0, {self.S}>>>(x);", out)

    def test_shifts_are_not_the_end_of_a_launch(self):
        self.assertEqual(self.rewrite("k<<<n >> 8, 256>>>(x);"),
                         (f"k<<<n >> 8, 256, 0, {self.S}>>>(x);", 1))

    def test_what_does_not_parse_is_left_alone(self):
        for text in ["a <<< b; c >>> d;", "k<<<(g, b>>>(x);", "k<<<g, b", "<<<"]:
            self.assertEqual(self.rewrite(text), (text, 0), text)

    def test_an_inline_extension_gets_the_stream_header_and_a_note(self):
        cuda = "__global__ void k(float* x) {}\nvoid run(float* x) { k<<<1, 32>>>(x); }\n"
        extension = Extension.inline("m", "void run(float* x);", cuda, ["run"])
        (name, unit), = extension.cuda_units
        self.assertTrue(unit.startswith(CUDA_PRELUDE + launch_streams.STREAM_PRELUDE))
        self.assertIn(f"k<<<1, 32, 0, {self.S}>>>(x);", unit)
        self.assertTrue(any("current stream" in note for note in extension.notes))

    def test_an_extension_without_bare_launches_is_unchanged(self):
        cuda = "__global__ void k(float* x) {}\n"
        extension = Extension.inline("m", "void run(float* x);", cuda, ["run"])
        (name, unit), = extension.cuda_units
        self.assertEqual(unit, CUDA_PRELUDE + cuda)
        self.assertNotIn(launch_streams.STREAM_PRELUDE, unit)
        self.assertEqual(extension.notes, [])

if __name__ == "__main__":
    unittest.main()
