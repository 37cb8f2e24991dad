"""The toolchain an extension is built with, probed from the installed torch.

The compilers, include directories, libraries and defines are torch's own for extensions
(torch.utils.cpp_extension), so a unit builds as torch's build would build it. The probe also
says what of the toolchain enters the cache key (``key_parts``): torch's version and CUDA
version, the C++ ABI, the nvcc and host-compiler ``--version`` text and paths, the architecture
and the Python version; anything of them that differs must not reuse another's build.
"""
import functools
import os
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor


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
