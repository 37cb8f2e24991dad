// kernel_type "multi_kernel" on the CPU: the entry point, its arguments in contract order, its
// returned tensors compared, and the V2 contract's error messages.
#include "python_test_support.hpp"

#include "request/parse.hpp"

namespace keval::test::python {
namespace {

const char* kIO = R"({"args": [
    {"name": "x", "type": "tensor", "role": "input",
     "tensor_spec": {"shape": [1024], "dtype": "float32", "init": {"kind": "randn", "seed": 42}}},
    {"name": "y", "type": "tensor", "role": "input",
     "tensor_spec": {"shape": [1024], "dtype": "float32", "init": {"kind": "randn", "seed": 43}}},
    {"name": "scale", "type": "float", "value": 2.0}]})";

const char* kPipeline = R"(import torch

def preprocess(x, y):
    return x + y

def run(x, y, scale):
    """Entry point: two stages, as the V2 contract's example (without the GPU kernels)."""
    out = preprocess(x, y)
    return out * scale
)";

json::object multi(const std::string& source, json::object metadata = {{"entry_point", "run"}},
                   const char* io = kIO) {
  return kernel("multi_kernel", source, std::move(metadata), io);
}

class MultiKernel : public TorchTest {
protected:
  void SetUp() override {
    TorchTest::SetUp();
    if (IsSkipped())
      return;
    ASSERT_NE(built_registry().find("multi_kernel"), nullptr) << "multi_kernel was not built";
  }
};

TEST_F(MultiKernel, EntryPointRunsOnContractInputs) {
  const auto r = run_request(evaluate(multi(kPipeline)), false, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_EQ(text(custom_info(r).at("entry_point")), "run");
  EXPECT_EQ(exec(r).at("runtime_stats").at("count").to_number<int64_t>(), 10);
}

TEST_F(MultiKernel, ComparedAgainstTorchOnIdenticalInputs) {
  // The torch reference has no contract: it borrows multi_kernel's inputs (and names `scale`).
  const auto r = run_request(
      compare(kernel("torch", "import torch\ndef ref(x, y, scale):\n    return (x + y) * scale\n",
                     {{"function_name", "ref"}}),
              multi(kPipeline)),
      true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_TRUE(exec(r).at("correctness").as_bool());
}

TEST_F(MultiKernel, WrongResultFailsWithItsMismatchCount) {
  // Shifted far beyond the tolerance: zeroing them instead would leave any element the job's secret
  // seed made near 0 within tolerance, and the count short of 10 (it was, once in CI).
  const auto r =
      run_request(compare(multi(kPipeline),
                          multi("import torch\ndef run(x, y, scale):\n    out = (x + y) * scale\n"
                                "    out[:10] += 100.0\n    return out\n")),
                  true, built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_TRUE(contains(validation_error(r), "10 of 1024")) << validation_error(r);
}

TEST_F(MultiKernel, SeveralReturnedTensorsAreAllCompared) {
  const char* source = "import torch\ndef run(x, y, scale):\n    return x * scale, y - x\n";
  const auto r = run_request(compare(multi(source), multi(source)), true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  const auto& trials = exec(r).at("metadata").at("validation").at("trials").as_array();
  EXPECT_EQ(trials.at(0).at("comparisons").as_array().size(), 2u);
}

TEST_F(MultiKernel, BoolAndIntegerInputsKeepTheirDtypes) {
  const char* io = R"({"args": [
      {"name": "mask", "type": "tensor", "tensor_spec": {"shape": [64], "dtype": "bool",
                                                         "init": {"kind": "ones"}}},
      {"name": "idx", "type": "tensor", "tensor_spec": {"shape": [64], "dtype": "int64",
                                                        "init": {"kind": "arange"}}},
      {"name": "flag", "type": "bool", "value": true},
      {"name": "label", "type": "str", "value": "keval"}]})";
  const char* source = R"(import torch
def run(mask, idx, flag, label):
    assert mask.dtype == torch.bool and bool(mask.all()), mask
    assert idx.dtype == torch.int64 and int(idx[5]) == 5, idx
    assert flag is True and label == "keval", (flag, label)
    return torch.where(mask, idx * 2, idx)
)";
  const auto r = run_request(evaluate(kernel("multi_kernel", source, {{"entry_point", "run"}}, io)),
                             false, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
}

TEST_F(MultiKernel, EntryPointNotFoundUsesTheSeedsMessage) {
  const auto r =
      run_request(evaluate(multi("import torch\ndef main(x, y, scale):\n    return x\n")), false,
                  built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_EQ(compilation_error(r), "Entry point function 'run' not found in module");
}

TEST_F(MultiKernel, MissingEntryPointUsesTheSeedsMessage) {
  const auto r = run_request(evaluate(multi(kPipeline, {{"description", "no entry point"}})), false,
                             built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_EQ(compilation_error(r), "entry_point must be specified in metadata");
}

TEST_F(MultiKernel, MissingIOContractIsABadRequest) {
  // The host rejects it before a worker starts (the manifest requires an IOContract); the
  // plugin's own check says "IOContract is required for multi_kernel type".
  try {
    run_request(evaluate(multi(kPipeline, {{"entry_point", "run"}}, nullptr)), false,
                built_registry());
    FAIL() << "expected a request error";
  } catch (const request::RequestError& e) {
    EXPECT_TRUE(contains(e.what(), "IOContract is required")) << e.what();
  }
}

TEST_F(MultiKernel, ExceptionInTheEntryPointHasTheTraceback) {
  const auto r = run_request(evaluate(multi(R"(import torch

def stage_two(t):
    return t.view(3, -1)

def run(x, y, scale):
    t = x + y
    return stage_two(t)
)")),
                             false, built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  const std::string error = validation_error(r);
  EXPECT_TRUE(contains(error, "Entry point 'run' raised: RuntimeError")) << error;
  EXPECT_TRUE(contains(error, ", line 8, in run")) << error;
  EXPECT_TRUE(contains(error, ", line 4, in stage_two")) << error;
}

} // namespace
} // namespace keval::test::python
