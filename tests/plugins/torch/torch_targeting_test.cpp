// kernel_type "torch" on the CPU (what CI and a laptop get): every targeting rule of the V2
// contract and its error messages, with tracebacks that point at the submitted source's lines.
#include "python_test_support.hpp"

namespace keval::test::python {
namespace {

// Several targets in one source (the V2 contract's "Multiple Kernels in Single Source").
const char* kTargets = R"(import torch
import torch.nn as nn

def double_it(x):
    return x * 2.0

def add_one(x):
    return x + 1.0

class Model(nn.Module):
    def forward(self, x):
        return x * 3.0

    def negate(self, x):
        return -x

class Other(nn.Module):
    def forward(self, x):
        return x * 4.0

def get_inputs():
    return [torch.arange(8, dtype=torch.float32)]
)";

// A reference whose output is x * factor, to check which target the custom side ran.
json::object times(double factor) {
  return kernel("torch",
                R"(import torch
def scaled(x):
    return x * )" + std::to_string(factor) +
                    R"(
def get_inputs():
    return [torch.arange(8, dtype=torch.float32)]
)",
                json::object{{"function_name", "scaled"}});
}

class TorchTargeting : public TorchTest {
protected:
  // Compares the kTargets source, targeted by `metadata`, against x * factor.
  void expect_target(json::object metadata, double factor) {
    const auto r = run_request(compare(times(factor), kernel("torch", kTargets, metadata), 3), true,
                               built_registry());
    EXPECT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
    EXPECT_TRUE(exec(r).at("correctness").as_bool()) << validation_error(r);
  }
};

TEST_F(TorchTargeting, DefaultsToModelForward) {
  expect_target({}, 3.0);
}

TEST_F(TorchTargeting, FunctionName) {
  expect_target({{"function_name", "double_it"}}, 2.0);
}

TEST_F(TorchTargeting, ClassNameWithDefaultMethod) {
  expect_target({{"class_name", "Other"}}, 4.0);
}

TEST_F(TorchTargeting, ClassNameAndMethodName) {
  expect_target({{"class_name", "Model"}, {"method_name", "negate"}}, -1.0);
}

TEST_F(TorchTargeting, MethodNameAloneUsesModel) {
  expect_target({{"method_name", "negate"}}, -1.0);
}

TEST_F(TorchTargeting, FunctionNameWinsOverClassName) {
  const auto r = run_request(compare(times(2.0),
                                     kernel("torch", kTargets,
                                            {{"function_name", "double_it"},
                                             {"class_name", "Other"},
                                             {"method_name", "forward"}}),
                                     3),
                             true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  const auto& info = custom_info(r);
  EXPECT_EQ(text(info.at("target")), "function");
  EXPECT_EQ(info.at("ignored_metadata").as_array().size(), 2u) << json::serialize(info);
}

TEST_F(TorchTargeting, ClassNotFoundUsesTheSeedsMessage) {
  const auto r = run_request(evaluate(kernel("torch", "import torch\ndef f(x):\n    return x\n")),
                             false, built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_FALSE(exec(r).at("compiled").as_bool());
  EXPECT_EQ(compilation_error(r), "Class 'Model' not found") << json::serialize(r.body);
}

TEST_F(TorchTargeting, NamedClassNotFound) {
  const auto r = run_request(evaluate(kernel("torch", kTargets, {{"class_name", "Missing"}})),
                             false, built_registry());
  EXPECT_EQ(compilation_error(r), "Class 'Missing' not found");
}

TEST_F(TorchTargeting, FunctionNotFound) {
  const auto r = run_request(evaluate(kernel("torch", kTargets, {{"function_name", "nope"}})),
                             false, built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_EQ(compilation_error(r), "Function 'nope' not found");
}

TEST_F(TorchTargeting, MethodNotFound) {
  const auto r = run_request(evaluate(kernel("torch", kTargets, {{"method_name", "backward2"}})),
                             false, built_registry());
  EXPECT_EQ(compilation_error(r), "Method 'backward2' not found in class 'Model'");
}

TEST_F(TorchTargeting, ATargetThatIsNotAClass) {
  const auto r = run_request(evaluate(kernel("torch", kTargets, {{"class_name", "double_it"}})),
                             false, built_registry());
  EXPECT_EQ(compilation_error(r), "'double_it' is not a class");
}

TEST_F(TorchTargeting, MetadataOfTheWrongTypeIsTheRequestsFault) {
  const auto r = run_request(evaluate(kernel("torch", kTargets, {{"function_name", 3}})), false,
                             built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_EQ(compilation_error(r), "metadata.function_name must be a non-empty string");
}

TEST_F(TorchTargeting, SyntaxErrorNamesTheLine) {
  const auto r = run_request(
      evaluate(kernel("torch",
                      "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, "
                      "x)\n        return x\n")),
      false, built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_FALSE(exec(r).at("compiled").as_bool());
  const std::string error = compilation_error(r);
  EXPECT_TRUE(contains(error, "Loading the PyTorch source failed: SyntaxError")) << error;
  EXPECT_TRUE(contains(error, "line 4")) << error;
  EXPECT_TRUE(contains(error, "def forward(self, x)")) << error;
}

TEST_F(TorchTargeting, ExceptionAtImportHasTheTraceback) {
  const auto r =
      run_request(evaluate(kernel("torch", "import torch\n\nSCALE = 1\nBROKEN = SCALE / 0\n")),
                  false, built_registry());
  const std::string error = compilation_error(r);
  EXPECT_TRUE(contains(error, "ZeroDivisionError: division by zero")) << error;
  EXPECT_TRUE(contains(error, ", line 4, in <module>")) << error;
  EXPECT_TRUE(contains(error, "BROKEN = SCALE / 0")) << error;
  EXPECT_FALSE(contains(error, "importlib")) << "keval's own frames are left out: " << error;
}

TEST_F(TorchTargeting, ExceptionInForwardHasTheTracebackWithLineNumbers) {
  const auto r = run_request(evaluate(kernel("torch", R"(import torch
import torch.nn as nn

def helper(x):
    raise ValueError(f"bad shape {tuple(x.shape)}")

class Model(nn.Module):
    def forward(self, x):
        return helper(x)

def get_inputs():
    return [torch.ones(2, 3)]
)")),
                             false, built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_TRUE(exec(r).at("compiled").as_bool());
  const std::string error = validation_error(r);
  EXPECT_TRUE(contains(error, "Model.forward raised: ValueError: bad shape (2, 3)")) << error;
  EXPECT_TRUE(contains(error, ", line 9, in forward")) << error;
  EXPECT_TRUE(contains(error, ", line 5, in helper")) << error;
  EXPECT_TRUE(contains(error, "raise ValueError")) << error;
}

TEST_F(TorchTargeting, NoInputsAnywhereIsReported) {
  const auto r = run_request(evaluate(kernel("torch", R"(import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x
)")),
                             false, built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_TRUE(contains(validation_error(r), "defines no get_inputs()")) << validation_error(r);
}

TEST_F(TorchTargeting, ReturningANonTensorIsReported) {
  const auto r = run_request(evaluate(kernel("torch", R"(import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return float(x.sum())
def get_inputs():
    return [torch.ones(4)]
)")),
                             false, built_registry());
  EXPECT_TRUE(contains(validation_error(r), "Model.forward returned a float"))
      << validation_error(r);
}

TEST_F(TorchTargeting, EvaluateReportsRuntimeStats) {
  const auto r = run_request(evaluate(kernel("torch", kTargets), 20), false, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  const auto& stats = exec(r).at("runtime_stats").as_object();
  EXPECT_EQ(stats.at("count").to_number<int64_t>(), 20);
  // Wall clock on the CPU (CI); on a GPU machine the CUDA engine's events or graph replay.
  if (text(exec(r).at("metadata").at("device").at("type")) == "cpu") {
    EXPECT_EQ(text(stats.at("method")), "cpu_wall_clock");
  }
  EXPECT_GT(stats.at("median").to_number<double>(), 0.0);
  const auto& info = custom_info(r);
  EXPECT_EQ(text(info.at("class_name")), "Model");
  EXPECT_EQ(text(info.at("method_name")), "forward");
  EXPECT_TRUE(contains(text(info.at("source_file")), ".py"));
}

} // namespace
} // namespace keval::test::python
