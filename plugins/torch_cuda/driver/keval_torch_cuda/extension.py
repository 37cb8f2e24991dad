"""What one load_inline/load call asked for: the extension model.

An ``Extension`` holds the translation units torch would generate for the call (load_inline's
main.cpp and cuda.cu, or load()'s files as they are) and every flag, normalised the way torch
reads them, so that the same request in any of its argument forms is the same extension, with the
same cache key. It also records where keval's build departs from torch's (``notes``, for the
build record): bare kernel launches put on torch's current stream, a wrapper moved to nvcc.
"""
import os
import uuid

from . import launch_streams
from .cache import fingerprint_include_dir
from .headers import PCH_HEADER

# What torch's load_inline puts at the top of each generated file (torch/utils/cpp_extension.py).
# main.cpp includes torch/extension.h through a header of keval's own (headers.PCH_HEADER).
CPP_PRELUDE = f'#include "{PCH_HEADER}"\n'
CUDA_PRELUDE = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"


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

    def wire(self):
        """What a build_request carries (build.py, _build_by_host): the units as this process
        generated them and every flag. Include directories never travel (load()'s files stay in
        the job's directory: such an extension is built where it is asked for)."""
        return {"name": self.name,
                "cpp_units": [list(unit) for unit in self.cpp_units],
                "cuda_units": [list(unit) for unit in self.cuda_units],
                "extra_cflags": self.extra_cflags, "extra_cuda_cflags": self.extra_cuda_cflags,
                "extra_ldflags": self.extra_ldflags, "with_cuda": self.with_cuda}

    @classmethod
    def from_wire(cls, wire):
        """The extension a build_request describes, taken as it is: its units were generated
        (launches put on the current stream) by the process that asked."""
        extension = cls.__new__(cls)
        extension.name = str(wire["name"])
        extension.cpp_units = [(str(f), str(t)) for f, t in wire["cpp_units"]]
        extension.cuda_units = [(str(f), str(t)) for f, t in wire["cuda_units"]]
        extension.extra_cflags = [str(f) for f in wire["extra_cflags"]]
        extension.extra_cuda_cflags = [str(f) for f in wire["extra_cuda_cflags"]]
        extension.extra_ldflags = [str(f) for f in wire["extra_ldflags"]]
        extension.extra_include_paths = []
        extension.with_cuda = bool(wire["with_cuda"])
        extension.notes = []
        extension._fingerprints = {}
        return extension

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
