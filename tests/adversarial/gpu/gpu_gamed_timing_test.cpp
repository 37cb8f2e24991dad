// Issue 13 on the GPU: timing a kernel cannot game. Every timed sample runs on fresh inputs and
// its outputs are checked, so a candidate that stops computing once it believes it is timed (a
// __device__ launch counter, a different graph recorded while the stream is capturing) fails the
// sample it cheats in; work on a stream of its own is flagged (`static`) and `strict` fails it.
// Honest controls (a float4 CUDA add, a fused load_inline GELU, a Triton ModelNew) pass with no
// flag, and ModelNew = Model times both sides with the same method. Skipped, with the reason,
// without a usable CUDA device (the Python ones also without torch or Triton).
#include "adversarial_support.hpp"
#include "support/cuda_device.hpp"

namespace keval::test::adversarial {
namespace {

constexpr int64_t kN = 1 << 16;

json::object tensor_arg(const char* name, const char* role) {
  json::object spec{{"shape", json::array{kN}}, {"dtype", "float32"}};
  if (std::string(role) == "input")
    spec["init"] = json::object{{"kind", "randn"}};
  return json::object{{"name", name}, {"type", "tensor"}, {"role", role}, {"tensor_spec", spec}};
}

json::value vector_add_io() {
  return json::object{
      {"args",
       json::array{tensor_arg("x", "input"), tensor_arg("y", "input"), tensor_arg("out", "output"),
                   json::object{{"name", "n"}, {"type", "int"}, {"value", kN}}}},
      {"launch",
       json::object{{"grid", json::object{{"x", kN / 256}}}, {"block", json::object{{"x", 256}}}}}};
}

std::string method_of(const json::value& stats) {
  const auto* method = stats.is_object() ? stats.as_object().if_contains("method") : nullptr;
  return method != nullptr && method->is_string() ? std::string(method->as_string()) : "";
}

class GpuGamedTiming : public ::testing::Test {
protected:
  void SetUp() override { KEVAL_SKIP_WITHOUT_CUDA_DEVICE(); }
  // Skips (the caller returns on IsSkipped()) unless the plugin of `type` was built and, for the
  // Python types, the embedded interpreter imports torch.
  void require(const std::string& type) {
    if (built_registry().find(type) == nullptr)
      GTEST_SKIP() << "the " << type << " plugin was not built";
    if (type != "cuda" && !torch_problem().empty())
      GTEST_SKIP() << torch_problem();
  }
  static json::object with(json::object request, json::object extra) {
    for (auto& [key, value] : extra)
      request[key] = value;
    return request;
  }
  // Both sides' methods are the same, and the result carries no flag.
  static void expect_clean_and_fair(const CliRun& run) {
    EXPECT_EQ(run.exit_code, 0) << describe(run);
    EXPECT_TRUE(correctness(run.body)) << describe(run);
    EXPECT_TRUE(flags_of(run.body).empty()) << json::serialize(flags_of(run.body));
    const auto* ref = run.body.if_contains("ref_runtime");
    ASSERT_NE(ref, nullptr) << describe(run);
    EXPECT_EQ(method_of(*ref), method_of(exec_result(run.body).at("runtime_stats")))
        << describe(run);
  }
};

TEST_F(GpuGamedTiming, ADeviceLaunchCounterThatStopsComputingFailsATimedSample) {
  require("cuda");
  if (IsSkipped())
    return;
  TempDir tmp;
  const auto run =
      run_cli(compare_request(kernel("cuda", source("reference_vector_add.cu"), vector_add_io()),
                              kernel("cuda", source("device_counter_add.cu", {{"LAUNCHES", "12"}}),
                                     vector_add_io()),
                              unique_id("device-counter")),
              tmp.path() / "state");
  EXPECT_EQ(run.exit_code, 1) << describe(run);
  EXPECT_FALSE(correctness(run.body)) << describe(run);
  EXPECT_NE(validation_error(run.body).find("timed sample"), std::string::npos) << describe(run);
  EXPECT_FALSE(speedup(run.body).has_value()) << describe(run);
}

TEST_F(GpuGamedTiming, ADifferentGraphRecordedWhileCapturingFailsATimedSample) {
  require("torch");
  if (IsSkipped())
    return;
  TempDir tmp;
  const auto run = run_cli(relu_compare(source("capture_substitution.py"), unique_id("capture")),
                           tmp.path() / "state");
  EXPECT_EQ(run.exit_code, 1) << describe(run);
  EXPECT_FALSE(correctness(run.body)) << describe(run);
  EXPECT_NE(validation_error(run.body).find("timed sample"), std::string::npos) << describe(run);
}

TEST_F(GpuGamedTiming, WorkOnAPrivateStreamIsFlaggedAndStrictFailsIt) {
  require("torch");
  if (IsSkipped())
    return;
  TempDir tmp;
  const auto flagged =
      run_cli(relu_compare(source("private_stream.py"), unique_id("stream")), tmp.path() / "a");
  const json::object* flag = flag_named(flagged.body, "static");
  ASSERT_NE(flag, nullptr) << describe(flagged);
  EXPECT_NE(json::serialize(*flag).find("torch.cuda.Stream"), std::string::npos)
      << json::serialize(*flag);
  const auto strict = run_cli(with(relu_compare(source("private_stream.py"), unique_id("stream")),
                                   {{"strict", json::array{"static"}}}),
                              tmp.path() / "b");
  EXPECT_FALSE(correctness(strict.body)) << describe(strict);
  EXPECT_NE(validation_error(strict.body).find("static"), std::string::npos) << describe(strict);
}

TEST_F(GpuGamedTiming, HonestFloat4CudaAddPassesUnflagged) {
  require("cuda");
  if (IsSkipped())
    return;
  TempDir tmp;
  expect_clean_and_fair(
      run_cli(compare_request(kernel("cuda", source("reference_vector_add.cu"), vector_add_io()),
                              kernel("cuda", source("float4_add.cu"), vector_add_io()),
                              unique_id("float4")),
              tmp.path() / "state"));
}

TEST_F(GpuGamedTiming, HonestFusedGeluLoadInlinePassesUnflagged) {
  require("torch_cuda");
  if (IsSkipped())
    return;
  TempDir tmp;
  expect_clean_and_fair(run_cli(
      compare_request(kernel("torch", source("reference_gelu.py")),
                      kernel("torch_cuda", source("fused_gelu_load_inline.py")), unique_id("gelu")),
      tmp.path() / "state"));
}

TEST_F(GpuGamedTiming, HonestTritonModelNewPassesUnflagged) {
  require("torch");
  if (IsSkipped())
    return;
  TempDir tmp;
  expect_clean_and_fair(run_cli(relu_compare(source("triton_relu_model_new.py"), unique_id("tri")),
                                tmp.path() / "state"));
}

} // namespace
} // namespace keval::test::adversarial
