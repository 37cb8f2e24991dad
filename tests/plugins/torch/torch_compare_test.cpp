// KernelBench-style comparisons on the CPU: a torch Model against a torch ModelNew, through the
// core's validation and profiling. Identical seeded inputs and weights on both sides; a wrong
// candidate fails with its mismatch count.
#include "python_test_support.hpp"

namespace keval::test::python {
namespace {

// KernelBench level-1 shape: a Linear + activation with init and input generators.
const char* kReference = R"(import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))

batch, in_features, out_features = 16, 64, 32

def get_inputs():
    return [torch.randn(batch, in_features)]

def get_init_inputs():
    return [in_features, out_features]
)";

// The candidate, as KernelBench writes it: ModelNew only, no get_inputs / get_init_inputs.
// Its weights match the reference's only if both were built under the same seed.
const char* kCandidate = R"(import torch
import torch.nn as nn
import torch.nn.functional as F

class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return F.relu(x @ self.linear.weight.t() + self.linear.bias)
)";

// Wrong in exactly one output column: 16 of 512 elements.
const char* kWrongCandidate = R"(import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = torch.relu(self.linear(x))
        y[:, 0] += 1.0
        return y
)";

using TorchCompare = TorchTest;

TEST_F(TorchCompare, KernelBenchModelAgainstModelNewIsCorrectWithRuntimeStats) {
  const auto r = run_request(compare(kernel("torch", kReference), kernel("torch", kCandidate), 20),
                             true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_TRUE(exec(r).at("correctness").as_bool()) << validation_error(r);
  const auto& stats = exec(r).at("runtime_stats").as_object();
  EXPECT_EQ(stats.at("count").to_number<int64_t>(), 20);
  EXPECT_GT(stats.at("median").to_number<double>(), 0.0);
  EXPECT_TRUE(r.body.at("ref_runtime").is_object());
  EXPECT_GT(r.body.at("speedup").to_number<double>(), 0.0);
  EXPECT_EQ(text(custom_info(r).at("class_name")), "ModelNew");
  // Where profiling's wall time went (issue 17's breakdown): every part, the warm-up's with the
  // runs it made (warmup_runs, at least 3 a side) and within the parts it is counted in.
  const auto& profiling = exec(r).at("metadata").at("profiling").as_object();
  const auto& spent = profiling.at("sampling").at("time_ms").as_object();
  for (const char* part :
       {"setup", "warm_up", "inputs", "runs", "runs_calls", "outputs", "checks", "after"})
    EXPECT_GE(spent.at(part).to_number<double>(), 0.0) << part << ": " << json::serialize(spent);
  EXPECT_GT(spent.at("setup").to_number<double>(), 0.0) << json::serialize(spent);
  EXPECT_GT(spent.at("warm_up").to_number<double>(), 0.0) << json::serialize(spent);
  EXPECT_LT(spent.at("warm_up").to_number<double>(),
            spent.at("inputs").to_number<double>() + spent.at("runs").to_number<double>() +
                spent.at("outputs").to_number<double>() + 1.0)
      << json::serialize(spent);
  EXPECT_GE(r.body.at("ref_runtime").at("warmup_runs").to_number<int64_t>(), 3);
  // Of the setup: the first inputs and each side's timer, within it.
  const auto& parts = spent.at("setup_parts").as_object();
  double within = 0;
  for (const char* part : {"inputs", "timer_ref", "timer_custom"}) {
    EXPECT_GE(parts.at(part).to_number<double>(), 0.0) << part << ": " << json::serialize(parts);
    within += parts.at(part).to_number<double>();
  }
  EXPECT_LE(within, spent.at("setup").to_number<double>()) << json::serialize(spent);
}

TEST_F(TorchCompare, WrongModelNewFailsWithItsMismatchCount) {
  const auto r =
      run_request(compare(kernel("torch", kReference), kernel("torch", kWrongCandidate), 5), true,
                  built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_TRUE(exec(r).at("compiled").as_bool());
  EXPECT_FALSE(exec(r).at("correctness").as_bool());
  const std::string error = validation_error(r);
  EXPECT_TRUE(contains(error, "16 of 512")) << error;
}

TEST_F(TorchCompare, WeightsAreSeededIdenticallyOnBothSides) {
  // Both sides return the weights themselves: equal only when construction was seeded alike.
  const char* weights = R"(import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
    def forward(self, x):
        return self.conv.weight * 1.0
def get_inputs():
    return [torch.zeros(1)]
)";
  const auto r = run_request(compare(kernel("torch", weights), kernel("torch", weights), 3), true,
                             built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
}

TEST_F(TorchCompare, InputsAreIdenticalOnBothSidesAndSeededPerTrial) {
  // The candidate records what it saw: the same values as the reference, and different values
  // in each trial (a frozen input would make every trial the same test).
  const char* reference = R"(import torch
def get_inputs():
    return [torch.randn(256)]
class Model(torch.nn.Module):
    def forward(self, x):
        return x.clone()
)";
  const char* candidate = R"(import torch
seen = []
class ModelNew(torch.nn.Module):
    def forward(self, x):
        seen.append(float(x.sum()))
        if len(seen) == 3 and len(set(seen)) != 3:
            raise RuntimeError(f"trials saw the same inputs: {seen}")
        return x.clone()
)";
  const auto r = run_request(compare(kernel("torch", reference), kernel("torch", candidate), 3),
                             true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
}

TEST_F(TorchCompare, NonTensorValuesOfGetInputsAreKeptInPlace) {
  const char* reference = R"(import torch
def get_inputs():
    return [torch.randn(4, 5), 1]
class Model(torch.nn.Module):
    def forward(self, x, dim):
        return torch.cumsum(x, dim=dim)
)";
  const char* candidate = R"(import torch
class ModelNew(torch.nn.Module):
    def forward(self, x, dim):
        assert dim == 1, dim
        out = x.clone()
        for j in range(1, x.shape[1]):
            out[:, j] += out[:, j - 1]
        return out
)";
  const auto r = run_request(compare(kernel("torch", reference), kernel("torch", candidate), 3),
                             true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
}

TEST_F(TorchCompare, TupleOutputsAreComparedOneByOne) {
  const char* reference = R"(import torch
def get_inputs():
    return [torch.randn(10)]
def split(x):
    return x.sort()
)";
  const char* candidate = R"(import torch
def split(x):
    values, indices = torch.sort(x)
    return values, indices
)";
  const auto r = run_request(compare(kernel("torch", reference, {{"function_name", "split"}}),
                                     kernel("torch", candidate, {{"function_name", "split"}}), 3),
                             true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  const auto& trials = exec(r).at("metadata").at("validation").at("trials").as_array();
  EXPECT_EQ(trials.at(0).at("comparisons").as_array().size(), 2u);
  // Each trial says where its wall time went (issue 17's breakdown), a side's launch included.
  for (const auto& trial : trials) {
    const auto& spent = trial.at("time_ms").as_object();
    for (const char* part : {"inputs", "ref", "custom", "checks"})
      EXPECT_GE(spent.at(part).to_number<double>(), 0.0) << part << ": " << json::serialize(trial);
    EXPECT_GT(spent.at("custom").to_number<double>(), 0.0) << json::serialize(trial);
  }
}

TEST_F(TorchCompare, ScalarBoolAndHalfOutputsCrossTheBridge) {
  // A 0-dim tensor, a bool tensor (torch 1.13 has no DLPack bool: it travels as uint8) and a
  // bfloat16 tensor.
  const char* source = R"(import torch
def get_inputs():
    return [torch.randn(64)]
def stats(x):
    return x.sum(), x > 0, x.to(torch.bfloat16)
)";
  const auto r = run_request(compare(kernel("torch", source, {{"function_name", "stats"}}),
                                     kernel("torch", source, {{"function_name", "stats"}}), 3),
                             true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  const auto& comparisons =
      exec(r).at("metadata").at("validation").at("trials").at(0).at("comparisons").as_array();
  ASSERT_EQ(comparisons.size(), 3u);
  EXPECT_EQ(text(comparisons.at(1).at("dtype")), "bool");
  EXPECT_EQ(text(comparisons.at(2).at("dtype")), "bfloat16");

  // A wrong bool output is caught element by element.
  const auto wrong =
      run_request(compare(kernel("torch", source, {{"function_name", "stats"}}),
                          kernel("torch",
                                 "import torch\ndef stats(x):\n    return x.sum(), x >= 100, "
                                 "x.to(torch.bfloat16)\n",
                                 {{"function_name", "stats"}}),
                          3),
                  true, built_registry());
  EXPECT_EQ(wrong.verdict, Verdict::kernel_failed);
  EXPECT_TRUE(contains(validation_error(wrong), "output 1")) << validation_error(wrong);
}

TEST_F(TorchCompare, IOContractDrivesInputsWhenGiven) {
  // The reference has no generators; the candidate's IOContract shapes both sides' inputs.
  const char* io = R"({"args": [
      {"name": "a", "type": "tensor", "tensor_spec": {"shape": [8, 16], "dtype": "float32",
                                                      "init": {"kind": "randn", "seed": 3}}},
      {"name": "b", "type": "tensor", "tensor_spec": {"shape": [16, 4], "dtype": "float32",
                                                      "init": {"kind": "uniform", "seed": 4}}},
      {"name": "alpha", "type": "float", "value": 0.5}]})";
  const auto r = run_request(
      compare(kernel("torch", "import torch\ndef mm(a, b, alpha):\n    return alpha * (a @ b)\n",
                     {{"function_name", "mm"}}),
              kernel("torch",
                     "import torch\ndef mm(a, b, alpha):\n    return torch.matmul(a * alpha, b)\n",
                     {{"function_name", "mm"}}, io),
              3),
      true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
}

// The command a user runs: `keval compare` of the examples, exit codes included.
TEST_F(TorchCompare, KevalCompareOfTheKernelBenchExamples) {
  const std::string examples = std::string(KEVAL_TEST_SOURCE_DIR) + "/examples/";
  const auto good = run_keval({"compare", examples + "torch_kernelbench_compare.json"});
  ASSERT_EQ(good.exit_code, 0) << good.out << good.err;
  const auto good_body = json::parse(good.out).as_object();
  EXPECT_TRUE(good_body.at("kernel_exec_result").at("correctness").as_bool());
  EXPECT_EQ(good_body.at("kernel_exec_result").at("runtime_stats").at("count").to_number<int64_t>(),
            100);

  const auto wrong = run_keval({"compare", examples + "torch_kernelbench_wrong.json"});
  EXPECT_EQ(wrong.exit_code, 1) << wrong.out << wrong.err;
  const auto wrong_body = json::parse(wrong.out).as_object();
  EXPECT_FALSE(wrong_body.at("kernel_exec_result").at("correctness").as_bool());
  EXPECT_TRUE(contains(text(wrong_body.at("validation_error")), " elements differ")) << wrong.out;
}

TEST_F(TorchCompare, ModifyingAnInputIsCaught) {
  const char* candidate = R"(import torch
class ModelNew(torch.nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = torch.nn.Linear(in_features, out_features)
    def forward(self, x):
        x.relu_()
        return torch.relu(self.linear(x))
)";
  const auto r = run_request(compare(kernel("torch", kReference), kernel("torch", candidate), 3),
                             true, built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_TRUE(contains(validation_error(r), "modified its input")) << validation_error(r);
}

} // namespace
} // namespace keval::test::python
