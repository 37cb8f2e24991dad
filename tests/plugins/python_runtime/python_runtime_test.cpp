// The shared Python runtime: plugins probe without starting Python, every Python type of a job
// runs in one interpreter per side, and the interpreter is the one KEVAL_PYTHON names (virtual
// environments included) or the build's.
#include "python_test_support.hpp"
#include "support/scoped_env.hpp"

#include "request/parse.hpp"

#include <keval/plugin.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include <dlfcn.h>

#include <boost/beast/core/detail/base64.hpp>

namespace keval::test::python {
namespace {

namespace fs = std::filesystem;

using keval::test::ScopedEnv;

TEST(PythonRuntime, ManifestDoesNotStartPython) {
  for (const char* path :
       {KEVAL_TEST_TORCH_PLUGIN, KEVAL_TEST_TRITON_PLUGIN, KEVAL_TEST_MULTI_KERNEL_PLUGIN}) {
    void* library = ::dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(library, nullptr) << ::dlerror();
    auto entry = reinterpret_cast<keval_plugin_entry_fn>(::dlsym(library, KEVAL_PLUGIN_ENTRY_NAME));
    ASSERT_NE(entry, nullptr);
    const keval_manifest* manifest = entry()->manifest();
    ASSERT_NE(manifest, nullptr);
    EXPECT_TRUE(manifest->capabilities & KEVAL_CAP_NEEDS_PYTHON);
    // libpython came in with the runtime library; the interpreter must still be down.
    auto is_initialized = reinterpret_cast<int (*)()>(::dlsym(library, "Py_IsInitialized"));
    ASSERT_NE(is_initialized, nullptr);
    EXPECT_EQ(is_initialized(), 0) << path;
  }
}

TEST(PythonRuntime, PluginsAreRegisteredWithTheirCapabilities) {
  const auto& registry = built_registry();
  const auto* torch = registry.find("torch");
  const auto* triton = registry.find("triton");
  const auto* multi = registry.find("multi_kernel");
  ASSERT_NE(torch, nullptr);
  ASSERT_NE(triton, nullptr);
  ASSERT_NE(multi, nullptr);
  EXPECT_TRUE(torch->has(KEVAL_CAP_DEFAULT_INPUTS));
  EXPECT_TRUE(torch->has(KEVAL_CAP_RETURNS_OUTPUTS));
  EXPECT_TRUE(torch->has(KEVAL_CAP_DEVICE_CPU));
  EXPECT_FALSE(torch->has(KEVAL_CAP_REQUIRES_IO_CONTRACT));
  EXPECT_TRUE(triton->has(KEVAL_CAP_REQUIRES_IO_CONTRACT));
  EXPECT_FALSE(triton->has(KEVAL_CAP_DEVICE_CPU));
  EXPECT_TRUE(multi->has(KEVAL_CAP_REQUIRES_IO_CONTRACT));
  EXPECT_TRUE(multi->has(KEVAL_CAP_RETURNS_OUTPUTS));
  // The runtime library sits beside the plugins directory, never in it.
  EXPECT_FALSE(fs::exists(plugin_dir() / "libkeval_python_runtime.so"));
  EXPECT_TRUE(fs::exists(plugin_dir().parent_path() / "libkeval_python_runtime.so"));
}

using PythonRuntimeJob = TorchTest;

TEST_F(PythonRuntimeJob, EachSideHasItsOwnInterpreterAndOnlyTheCandidateSeesTheReference) {
  // The candidate's runner compiles the reference's source beside its own (KernelBench keeps
  // get_inputs there), under a distinct module name; the reference's runner never loads the
  // candidate's source, and the two are different processes.
  const char* io = R"({"args": [{"name": "x", "type": "tensor",
                                 "tensor_spec": {"shape": [4], "dtype": "float32"}}]})";
  const auto r = run_request(compare(kernel("torch", R"(import os, sys
def f(x):
    if any(m.startswith("keval_multi_kernel_custom_") for m in sys.modules):
        raise RuntimeError("the reference's interpreter holds the candidate's module")
    print("ref pid", os.getpid())
    return x + 1
)",
                                            {{"function_name", "f"}}),
                                     kernel("multi_kernel", R"(import os, sys
def run(x):
    refs = [m for m in sys.modules if m.startswith("keval_torch_ref_")]
    mine = [m for m in sys.modules if m.startswith("keval_multi_kernel_custom_")]
    if len(refs) != 1 or len(mine) != 1:
        raise RuntimeError(f"expected the reference as a companion: {refs} {mine}")
    print("custom pid", os.getpid())
    return x + 1
)",
                                            {{"entry_point", "run"}}, io)),
                             true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  const std::string out(
      r.body.at("kernel_exec_result").at("metadata").at("worker").at("stdout").as_string());
  const auto pid_after = [&](const std::string& label) {
    const size_t at = out.find(label);
    return at == std::string::npos ? std::string() : out.substr(at + label.size(), 8);
  };
  ASSERT_FALSE(pid_after("ref pid ").empty()) << out;
  ASSERT_FALSE(pid_after("custom pid ").empty()) << out;
  EXPECT_NE(std::stol(pid_after("ref pid ")), std::stol(pid_after("custom pid "))) << out;
}

TEST_F(PythonRuntimeJob, KevalPythonSelectsAVirtualEnvironment) {
  TempDir dir;
  const fs::path venv = dir.path() / "venv";
  const auto made = supervisor::run_command(
      embedded_python(), {"-m", "venv", "--without-pip", venv.string()}, std::chrono::seconds(120));
  if (!made.exit_code || *made.exit_code != 0)
    GTEST_SKIP() << "cannot create a virtual environment here: " << made.err;
  // The new venv sees the embedded interpreter's packages (torch among them, wherever they are
  // installed: a venv of their own on the GPU machine) through a .pth file, as a venv with its
  // own torch would see that.
  const auto paths = supervisor::run_command(
      embedded_python(),
      {"-c", "import site, sys; print('python%d.%d' % sys.version_info[:2]); "
             "print('\\n'.join(site.getsitepackages()))"},
      std::chrono::seconds(60));
  ASSERT_TRUE(paths.exit_code && *paths.exit_code == 0) << paths.err;
  const auto first_line = paths.out.find('\n');
  const std::string version_dir = paths.out.substr(0, first_line);
  std::ofstream(venv / "lib" / version_dir / "site-packages" / "keval_parent.pth")
      << paths.out.substr(first_line + 1);
  const fs::path python = venv / "bin" / "python3";
  ScopedEnv env("KEVAL_PYTHON", python.string());
  const auto r = run_request(evaluate(kernel("torch", R"(import sys, torch
def f(x):
    if sys.prefix == sys.base_prefix or not sys.prefix.endswith("venv"):
        raise RuntimeError(f"not the venv: prefix {sys.prefix}")
    return x * 2
def get_inputs():
    return [torch.ones(3)]
)",
                                             {{"function_name", "f"}})),
                             false, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_EQ(text(custom_info(r).at("python_executable")), python.string());
}

TEST_F(PythonRuntimeJob, KevalPythonThatDoesNotExistIsKevalsFailure) {
  ScopedEnv env("KEVAL_PYTHON", "/nonexistent/bin/python3");
  const auto r = run_request(evaluate(kernel("torch", "import torch\n")), false, built_registry());
  EXPECT_EQ(r.verdict, Verdict::infrastructure) << json::serialize(r.body);
  EXPECT_TRUE(contains(text(r.body.at("error").at("message")), "KEVAL_PYTHON=/nonexistent"))
      << json::serialize(r.body);
}

TEST_F(PythonRuntimeJob, ARequestWithTwelveMebibytesOfInlineTensorDataRuns) {
  // The job frame carries the whole request to the worker: its cap must not be below the body
  // limit (this request's JSON is about 16 MiB, twice the cap of every other frame).
  const size_t n = 3u << 20; // float32: 12 MiB, incompressible enough to send uncompressed
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i)
    values[i] = static_cast<float>((i * 2654435761u) % 1000) * 0.25f;
  std::string b64(boost::beast::detail::base64::encoded_size(n * sizeof(float)), '\0');
  b64.resize(boost::beast::detail::base64::encode(b64.data(), values.data(), n * sizeof(float)));
  const std::string io = R"({"args": [{"name": "x", "type": "tensor", "tensor_spec": {"shape": [)" +
                         std::to_string(n) + R"(], "dtype": "float32", "data": {"data_b64": ")" +
                         b64 + R"("}}}]})";
  const auto r = run_request(evaluate(kernel("torch", "def f(x):\n    return x * 2\n",
                                             {{"function_name", "f"}}, io.c_str()),
                                      2),
                             false, built_registry());
  EXPECT_EQ(r.verdict, Verdict::success) << json::serialize(r.body).substr(0, 4000);
}

TEST_F(PythonRuntimeJob, UserOutputDoesNotBreakTheJob) {
  const auto r = run_request(evaluate(kernel("torch", R"(import torch
print("hello from module level")
class Model(torch.nn.Module):
    def forward(self, x):
        print("in forward")
        return x
def get_inputs():
    return [torch.ones(2)]
)")),
                             false, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  const std::string out = text(exec(r).at("metadata").at("worker").at("stdout"));
  EXPECT_TRUE(contains(out, "hello from module level")) << out;
}

} // namespace
} // namespace keval::test::python
