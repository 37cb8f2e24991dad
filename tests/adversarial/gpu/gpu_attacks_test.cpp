// The adversarial cases that need a GPU: a cuda kernel that scans device memory near its own
// buffers for the reference's output and copies it, a torch_cuda ModelNew that finds the
// reference's model through the garbage collector, and a Triton source that forges the protocol
// frames at import time. Each must end with the candidate failed. Skipped, with the reason,
// without a usable CUDA device (and the Python ones without torch or Triton).
#include "adversarial_support.hpp"
#include "support/cuda_device.hpp"

#include "cuda/driver.hpp"

namespace keval::test::adversarial {
namespace {

// Why no CUDA device is usable here, or "" when one is.
// "" when the embedded interpreter imports `module`, else why not.
std::string python_problem(const std::string& module) {
  const char* chosen = std::getenv("KEVAL_PYTHON");
  const std::string python =
      chosen != nullptr && chosen[0] != '\0' ? chosen : KEVAL_TEST_PYTHON_EXECUTABLE;
  if (python.empty())
    return "keval was built without Python";
  const auto r = supervisor::run_command(python, {"-c", "import " + module}, 120s);
  return r.exit_code && *r.exit_code == 0 ? std::string()
                                          : python + " cannot import " + module + ": " + r.err;
}

class GpuAttack : public ::testing::Test {
protected:
  void SetUp() override { KEVAL_SKIP_WITHOUT_CUDA_DEVICE(); }
  // Skips unless the plugin of `type` was built (and, for Python types, `module` imports); the
  // caller returns on IsSkipped().
  void require(const std::string& type, const std::string& module = {}) {
    if (built_registry().find(type) == nullptr)
      GTEST_SKIP() << "the " << type << " plugin was not built";
    if (!module.empty()) {
      const auto problem = python_problem(module);
      if (!problem.empty())
        GTEST_SKIP() << problem;
    }
  }
};

constexpr int64_t kN = 4096; // small: the buffers share the 2 MiB pages the scan reads

// A float32 tensor argument of kN elements; randn with `seed` unless it is an output.
json::object tensor_arg(const char* name, const char* role, int seed = 0) {
  json::object spec{{"shape", json::array{kN}}, {"dtype", "float32"}};
  if (seed != 0)
    spec["init"] = json::object{{"kind", "randn"}, {"seed", seed}};
  return json::object{{"name", name}, {"type", "tensor"}, {"role", role}, {"tensor_spec", spec}};
}

json::value vector_add_io() {
  return json::object{
      {"args", json::array{tensor_arg("x", "input", 1), tensor_arg("y", "input", 2),
                           tensor_arg("out", "output"),
                           json::object{{"name", "n"}, {"type", "int"}, {"value", kN}}}},
      {"launch",
       json::object{{"grid", json::object{{"x", kN / 256}}}, {"block", json::object{{"x", 256}}}}}};
}

json::value relu_triton_io() {
  return json::object{
      {"args", json::array{tensor_arg("x_ptr", "input", 3), tensor_arg("out_ptr", "output"),
                           json::object{{"name", "n_elements"}, {"type", "int"}, {"value", kN}},
                           json::object{{"name", "BLOCK_SIZE"},
                                        {"type", "int"},
                                        {"value", 1024},
                                        {"is_meta", true}}}},
      {"launch", json::object{{"grid", json::object{{"x", kN / 1024}}}, {"num_warps", 4}}}};
}

TEST_F(GpuAttack, CudaKernelScanningDeviceMemoryFindsNoReferenceOutput) {
  require("cuda");
  if (IsSkipped())
    return;
  TempDir tmp;
  const auto request = compare_request(
      kernel("cuda", source("reference_vector_add.cu"), vector_add_io()),
      kernel("cuda", source("scan_device_memory.cu"), vector_add_io()), unique_id("scan"));
  const auto run = run_cli(request, tmp.path() / "state");
  ASSERT_FALSE(run.body.empty()) << describe(run);
  expect_cli_kernel_failure(run,
                            "the candidate writes zeros unless it finds the reference's output");
}

TEST_F(GpuAttack, TorchCudaModelFoundThroughTheGarbageCollectorIsNotTheReference) {
  require("torch", "torch");
  require("torch_cuda");
  if (IsSkipped())
    return;
  TempDir tmp;
  const auto run =
      run_cli(relu_compare(source("gc_reference.py"), unique_id("gc-torch-cuda"), "torch_cuda"),
              tmp.path() / "state");
  ASSERT_FALSE(run.body.empty()) << describe(run);
  expect_cli_kernel_failure(run, "the candidate returns its input");
}

// The build service by hand (forge_build_requests.py) in a torch_cuda job, where keval serves
// builds: a request claiming another toolchain is built for nothing and kept nowhere (an entry
// under it would be loaded by a later job that has that toolchain), and more requests than a
// runner may make end it. Either way the candidate fails.
TEST_F(GpuAttack, TorchCudaBuildRequestsByHandBuildNothingThatIsKept) {
  require("torch", "torch");
  require("torch_cuda");
  if (IsSkipped())
    return;
  TempDir tmp;
  const auto lie = run_cli(relu_compare(source("forge_build_requests.py", {{"MODE", "lie"}}),
                                        unique_id("build-lie"), "torch_cuda"),
                           tmp.path() / "state");
  ASSERT_FALSE(lie.body.empty()) << describe(lie);
  expect_cli_kernel_failure(lie, "a lying build request");
  EXPECT_NE(shown(lie.body, 100000).find("toolchain is not this machine"), std::string::npos)
      << shown(lie.body);
  size_t kept = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(tmp.path() / "state" / "cache", ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    kept += it->path().filename() == "manifest.json";
  EXPECT_EQ(kept, 0u) << "an entry was kept for a request keval refused to build";

  const auto flood = run_cli(relu_compare(source("forge_build_requests.py", {{"MODE", "flood"}}),
                                          unique_id("build-flood"), "torch_cuda"),
                             tmp.path() / "state");
  ASSERT_FALSE(flood.body.empty()) << describe(flood);
  expect_cli_kernel_failure(flood, "a flood of build requests");
  EXPECT_NE(shown(flood.body, 100000).find("asked for more than 32 builds"), std::string::npos)
      << shown(flood.body);
}

TEST_F(GpuAttack, TritonSourceForgingFramesAtImportMakesNoVerdict) {
  require("torch", "torch");
  require("triton", "triton");
  if (IsSkipped())
    return;
  TempDir tmp;
  const auto request =
      compare_request(kernel("torch", source("reference_relu.py")),
                      kernel("triton", source("triton_forge_frames.py"), relu_triton_io(),
                             json::object{{"kernel_name", "relu_kernel"}}),
                      unique_id("forge-triton"));
  const auto run = run_cli(request, tmp.path() / "state");
  ASSERT_FALSE(run.body.empty()) << describe(run);
  expect_cli_kernel_failure(run, "the kernel failed");
}

// The honest control on the GPU: the cuda reference against itself is correct.
TEST_F(GpuAttack, HonestCudaControlIsCorrect) {
  require("cuda");
  if (IsSkipped())
    return;
  TempDir tmp;
  const auto request = compare_request(
      kernel("cuda", source("reference_vector_add.cu"), vector_add_io()),
      kernel("cuda", source("reference_vector_add.cu"), vector_add_io()), unique_id("honest-cuda"));
  const auto run = run_cli(request, tmp.path() / "state");
  EXPECT_EQ(run.exit_code, 0) << describe(run);
  EXPECT_TRUE(correctness(run.body)) << describe(run);
}

} // namespace
} // namespace keval::test::adversarial
