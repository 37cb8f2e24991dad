// kernel_type "triton" without a GPU (CI): the request rules and what a job says is missing. The
// GPU half (launches, streams, graphs) is tests/gpu/python_end_to_end_test.cpp.
#include "python_test_support.hpp"

#include "request/parse.hpp"

namespace keval::test::python {
namespace {

TEST(PythonRuntimeRequests, TritonWithoutIOContractIsABadRequest) {
  ASSERT_NE(built_registry().find("triton"), nullptr) << "the triton plugin was not built";
  try {
    run_request(evaluate(kernel("triton", "import triton\n")), false, built_registry());
    FAIL() << "expected a request error";
  } catch (const request::RequestError& e) {
    EXPECT_TRUE(contains(e.what(), "IOContract is required")) << e.what();
  }
}

TEST(PythonRuntimeWithoutGpu, TritonSaysWhatIsMissing) {
  ASSERT_NE(built_registry().find("triton"), nullptr) << "the triton plugin was not built";
  const char* io = R"({"args": [
      {"name": "x", "type": "tensor", "tensor_spec": {"shape": [16], "dtype": "float32"}},
      {"name": "out", "type": "tensor", "role": "output",
       "tensor_spec": {"shape": [16], "dtype": "float32"}}],
      "launch": {"grid": [1]}})";
  const auto r = run_request(
      evaluate(kernel("triton", "import triton\n@triton.jit\ndef k(x, out):\n    pass\n", {}, io)),
      false, built_registry());
  if (r.verdict == Verdict::success)
    GTEST_SKIP() << "Triton and a CUDA device are present: the GPU suite covers this machine";
  // Without Triton (or torch), compilation says which is missing; with both, that no CUDA
  // device is usable.
  const std::string body = json::serialize(r.body);
  EXPECT_TRUE(contains(body, "needs Triton") || contains(body, "needs PyTorch") ||
              contains(body, "needs a CUDA device"))
      << body;
}

} // namespace
} // namespace keval::test::python
