// Whole requests: V2-contract examples parse unchanged, top-level settings, compare mode, JSON text
// errors and the size limits.
#include "core/request/request_test_util.hpp"

#include <gmock/gmock.h>

namespace keval::request::test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// ---- V2-contract requests, verbatim ----

TEST(SeedRequest, TritonExampleParsesEveryField) {
  EvalRequest request = parse_request(triton_request(), Mode::evaluate);

  EXPECT_EQ(request.mode, Mode::evaluate);
  EXPECT_FALSE(request.ref.has_value());
  EXPECT_EQ(request.kernel.kernel_type, "triton");
  EXPECT_THAT(request.kernel.source_code, HasSubstr("@triton.jit"));
  EXPECT_EQ(request.kernel.metadata.at("kernel_name"), "add_kernel");
  EXPECT_EQ(request.num_trials, 100);
  EXPECT_EQ(request.timeout_s, 120.0);
  EXPECT_THAT(request.warnings, IsEmpty());

  ASSERT_TRUE(request.kernel.io.has_value());
  const std::vector<ArgSpec>& args = request.kernel.io->args;
  ASSERT_EQ(args.size(), 4u);
  EXPECT_EQ(args[0].name, "x");
  EXPECT_EQ(args[0].type, ArgType::tensor);
  EXPECT_EQ(args[0].role, Role::input);
  ASSERT_TRUE(args[0].tensor_spec.has_value());
  EXPECT_EQ(args[0].tensor_spec->shape, std::vector<int64_t>{1024});
  EXPECT_EQ(args[0].tensor_spec->dtype, DType::f32);
  ASSERT_TRUE(args[0].tensor_spec->init.has_value());
  EXPECT_EQ(args[0].tensor_spec->init->kind, InitKind::randn);
  EXPECT_EQ(args[0].tensor_spec->init->seed, 42u);
  EXPECT_EQ(args[1].role, Role::output);
  EXPECT_FALSE(args[1].tensor_spec->init.has_value());
  EXPECT_EQ(args[2].type, ArgType::int_);
  EXPECT_EQ(args[2].value, json::value(1024));
  EXPECT_FALSE(args[2].is_meta);
  EXPECT_TRUE(args[3].is_meta);
  EXPECT_EQ(args[3].value, json::value(128));

  const LaunchConfig& launch = request.kernel.io->launch.value();
  ASSERT_TRUE(launch.grid.has_value());
  EXPECT_EQ(launch.grid->x, 8);
  EXPECT_EQ(launch.grid->y, 1);
  EXPECT_EQ(launch.grid->z, 1);
  EXPECT_FALSE(launch.block.has_value());
  EXPECT_EQ(launch.num_warps, 4);
  EXPECT_EQ(launch.num_stages, 2);
  EXPECT_FALSE(launch.shared_mem_bytes.has_value());
}

TEST(SeedRequest, MultiKernelExampleParsesUnchanged) {
  // The "Request Format" of the V2 contract's MULTI_KERNEL section, character for character.
  constexpr std::string_view kText = R"({
  "kernel": {
    "source_code": "...",
    "kernel_type": "multi_kernel",
    "metadata": {
      "entry_point": "run",
      "description": "Add with Triton, multiply with PyTorch"
    },
    "io": {
      "args": [
        {
          "name": "x",
          "type": "tensor",
          "tensor_spec": {
            "shape": [1024],
            "dtype": "float32",
            "init": {"kind": "randn", "seed": 42}
          },
          "role": "input"
        },
        {
          "name": "y",
          "type": "tensor",
          "tensor_spec": {
            "shape": [1024],
            "dtype": "float32",
            "init": {"kind": "randn", "seed": 43}
          },
          "role": "input"
        }
      ]
    }
  },
  "num_trials": 10
})";
  EvalRequest request = parse_request_text(kText, Mode::evaluate);

  EXPECT_EQ(request.kernel.kernel_type, "multi_kernel");
  EXPECT_EQ(request.kernel.metadata.at("entry_point"), "run");
  EXPECT_EQ(request.num_trials, 10);
  EXPECT_EQ(request.timeout_s, 120.0);
  ASSERT_EQ(request.kernel.io->args.size(), 2u);
  EXPECT_EQ(request.kernel.io->args[1].tensor_spec->init->seed, 43u);
  EXPECT_FALSE(request.kernel.io->launch.has_value());
  EXPECT_THAT(request.warnings, IsEmpty());
  EXPECT_EQ(request.original, json::parse(kText).as_object());
}

// Python clients send model.dict(): every optional field present, unset ones as null.
TEST(SeedRequest, PydanticDictWithNullsParsesWithoutWarnings) {
  constexpr std::string_view kText = R"({
    "kernel": {
      "source_code": "src", "kernel_type": "triton", "metadata": null,
      "io": {
        "args": [
          {"name": "x", "type": "tensor", "value": null, "role": "input", "is_meta": false,
           "tensor_spec": {"shape": [16], "dtype": "float32", "init": null, "data": null}},
          {"name": "n", "type": "int", "value": 16, "role": "input", "is_meta": false,
           "tensor_spec": null}
        ],
        "launch": {"grid": {"x": 1, "y": 1, "z": 1}, "block": null, "num_warps": null,
                   "num_stages": null}
      }
    },
    "num_trials": 100, "timeout": 120
  })";
  EvalRequest request = parse_request_text(kText, Mode::evaluate);

  EXPECT_THAT(request.warnings, IsEmpty());
  EXPECT_TRUE(request.kernel.metadata.empty());
  EXPECT_FALSE(request.kernel.io->args[0].tensor_spec->init.has_value());
  EXPECT_FALSE(request.kernel.io->launch->block.has_value());
  EXPECT_FALSE(request.kernel.io->launch->num_warps.has_value());
}

TEST(SeedRequest, CompareExampleParsesBothKernels) {
  // the V2 contract's POST /compare example, with the optional io left out.
  constexpr std::string_view kText = R"({
  "ref_kernel": {
    "source_code": "...",
    "kernel_type": "torch"
  },
  "custom_kernel": {
    "source_code": "...",
    "kernel_type": "torch_cuda"
  },
  "num_trials": 100,
  "timeout": 120
})";
  EvalRequest request = parse_request_text(kText, Mode::compare);

  EXPECT_EQ(request.mode, Mode::compare);
  ASSERT_TRUE(request.ref.has_value());
  EXPECT_EQ(request.ref->kernel_type, "torch");
  EXPECT_EQ(request.kernel.kernel_type, "torch_cuda");
  EXPECT_FALSE(request.kernel.io.has_value());
  EXPECT_TRUE(request.kernel.io_json.is_null());
  EXPECT_THAT(request.warnings, IsEmpty());
}

// ---- top-level settings ----

json::value minimal_request() {
  return json::parse(R"({"kernel": {"source_code": "s", "kernel_type": "torch"}})");
}

TEST(TopLevel, DefaultsMatchSeed) {
  EvalRequest request = parse_request(minimal_request(), Mode::evaluate);

  EXPECT_EQ(request.num_trials, 100);
  EXPECT_EQ(request.timeout_s, 120.0);
  EXPECT_EQ(request.num_correctness_trials, 5);
  EXPECT_EQ(request.tolerance.atol, 1e-2);
  EXPECT_EQ(request.tolerance.rtol, 1e-2);
  EXPECT_FALSE(request.async);
  EXPECT_FALSE(request.job_id.has_value());
  EXPECT_TRUE(request.kernel.metadata.empty());
  EXPECT_FALSE(request.kernel.io.has_value());
  EXPECT_TRUE(request.kernel.io_json.is_null());
}

TEST(TopLevel, KevalExtensionsAreRead) {
  json::value doc = minimal_request();
  doc.as_object()["num_correctness_trials"] = 1000;
  doc.as_object()["atol"] = 0;
  doc.as_object()["rtol"] = 0.5;
  doc.as_object()["async"] = true;
  doc.as_object()["job_id"] = "Job-1.a_B";
  EvalRequest request = parse_request(doc, Mode::evaluate);

  EXPECT_EQ(request.num_correctness_trials, 1000);
  EXPECT_EQ(request.tolerance.atol, 0.0);
  EXPECT_EQ(request.tolerance.rtol, 0.5);
  EXPECT_TRUE(request.async);
  EXPECT_EQ(request.job_id, "Job-1.a_B");
  EXPECT_THAT(request.warnings, IsEmpty());
}

TEST(TopLevel, IntegralDoublesAndFractionalTimeoutAreAccepted) {
  json::value doc = with(with(minimal_request(), "/num_trials", "1e3"), "/timeout", "0.5");
  EvalRequest request = parse_request(doc, Mode::evaluate);

  EXPECT_EQ(request.num_trials, 1000);
  EXPECT_EQ(request.timeout_s, 0.5);
}

TEST(TopLevel, SeedStrictAndThresholdAreRead) {
  json::value doc = with(with(with(minimal_request(), "/seed", "18446744073709551615"), "/strict",
                              R"(["precision", "static", "precision"])"),
                         "/excessive_speedup_threshold", "25");
  EvalRequest request = parse_request(doc, Mode::evaluate);
  EXPECT_EQ(request.seed, UINT64_MAX);
  EXPECT_EQ(request.strict_flags, (std::vector<std::string>{"precision", "static"}));
  EXPECT_EQ(request.excessive_speedup_threshold, 25.0);

  EvalRequest all = parse_request(with(minimal_request(), "/strict", "true"), Mode::evaluate);
  EXPECT_EQ(all.strict_flags.size(), std::size(kFlagNames));
  EvalRequest none = parse_request(with(minimal_request(), "/strict", "false"), Mode::evaluate);
  EXPECT_TRUE(none.strict_flags.empty());
  EvalRequest unset = parse_request(minimal_request(), Mode::evaluate);
  EXPECT_FALSE(unset.seed.has_value()) << "no seed: the job draws a secret one";
  EXPECT_EQ(unset.excessive_speedup_threshold, 10.0);
  EXPECT_TRUE(unset.device_trace) << "timed samples are traced unless the request says not";
  EXPECT_FALSE(parse_request(with(minimal_request(), "/device_trace", "false"), Mode::evaluate)
                   .device_trace);
}

TEST(TopLevel, HardwareTimeIsOffUnlessAskedForAndTrueAsksForTheDefaultRuns) {
  const auto runs = [](const char* value) {
    return parse_request(with(minimal_request(), "/hardware_time", value), Mode::evaluate)
        .hardware_time_runs;
  };
  EXPECT_EQ(parse_request(minimal_request(), Mode::evaluate).hardware_time_runs, 0);
  EXPECT_EQ(runs("true"), kDefaultHardwareTimeRuns);
  EXPECT_EQ(runs("false"), 0);
  EXPECT_EQ(runs("3"), 3);
  EXPECT_EQ(runs("100"), kMaxHardwareTimeRuns);
}

TEST(TopLevel, LimitsAreInclusive) {
  json::value doc = with(with(minimal_request(), "/num_trials", "100000"), "/timeout", "86400");
  EvalRequest request = parse_request(doc, Mode::evaluate);

  EXPECT_EQ(request.num_trials, 100000);
  EXPECT_EQ(request.timeout_s, 86400.0);
}

TEST(TopLevel, OriginalKeepsTheWholeRequest) {
  json::value doc = with(triton_request(), "/client_note", R"({"nested": [1, 2]})");
  EvalRequest request = parse_request(doc, Mode::evaluate);

  EXPECT_EQ(request.original, doc.as_object());
}

TEST(TopLevel, MetadataAndIoAreKeptAsSent) {
  json::value doc = with(triton_request(), "/kernel/metadata", R"({"a": {"b": [1, null]}})");
  EvalRequest request = parse_request(doc, Mode::evaluate);

  EXPECT_EQ(json::value(request.kernel.metadata), doc.at_pointer("/kernel/metadata"));
  EXPECT_EQ(request.kernel.io_json, doc.at_pointer("/kernel/io"));
}

TEST(TopLevel, UnknownFieldsAreWarningsNamingTheirPath) {
  json::value doc = with(triton_request(), "/priority", "1");
  doc = with(doc, "/kernel/entry", R"("x")");
  doc = with(doc, "/kernel/io/extra", "[]");
  EvalRequest request = parse_request(doc, Mode::evaluate);

  EXPECT_THAT(request.warnings, ElementsAre("kernel.io.extra: unknown field, ignored",
                                            "kernel.entry: unknown field, ignored",
                                            "priority: unknown field, ignored"));
}

TEST(TopLevel, RequestErrorWhatJoinsPathAndMessage) {
  RequestError error("kernel.io", "must be an object, got string");
  EXPECT_STREQ(error.what(), "kernel.io: must be an object, got string");
  EXPECT_EQ(error.path(), "kernel.io");
  EXPECT_EQ(error.message(), "must be an object, got string");
  EXPECT_STREQ(RequestError("", "invalid JSON").what(), "invalid JSON");
}

// ---- compare mode ----

json::value compare_request() {
  json::value kernel = triton_request().at("kernel");
  json::object doc;
  doc["ref_kernel"] = kernel;
  doc["custom_kernel"] = kernel;
  doc["num_trials"] = 10;
  return doc;
}

TEST(Compare, ReadsRefAndCustomKernels) {
  json::value doc = with(compare_request(), "/ref_kernel/kernel_type", R"("torch")");
  EvalRequest request = parse_request(doc, Mode::compare);

  ASSERT_TRUE(request.ref.has_value());
  EXPECT_EQ(request.ref->kernel_type, "torch");
  EXPECT_EQ(request.kernel.kernel_type, "triton");
  EXPECT_EQ(request.ref->io->args.size(), 4u);
  EXPECT_EQ(request.kernel.io->args.size(), 4u);
  EXPECT_EQ(request.num_trials, 10);
}

TEST(Compare, BothKernelsAreRequired) {
  EXPECT_EQ(error_of(without(compare_request(), "/ref_kernel"), Mode::compare).what(),
            std::string("ref_kernel: required field is missing"));
  EXPECT_EQ(error_of(without(compare_request(), "/custom_kernel"), Mode::compare).what(),
            std::string("custom_kernel: required field is missing"));
}

TEST(Compare, ErrorsArePrefixedWithTheKernelKey) {
  json::value doc = with(compare_request(), "/custom_kernel/io/args/2",
                         R"({"name": "t", "type": "tensor", "tensor_spec": {"shape": [4, 0]}})");
  EXPECT_STREQ(error_of(doc, Mode::compare).what(),
               "custom_kernel.io.args[2].tensor_spec.shape[1]: must be > 0, got 0");

  doc = with(compare_request(), "/ref_kernel/kernel_type", "null");
  EXPECT_STREQ(error_of(doc, Mode::compare).what(),
               "ref_kernel.kernel_type: required field is null");
}

TEST(Compare, EvaluateKeyIsUnknownInCompareModeAndViceVersa) {
  json::value doc = with_value(compare_request(), "/kernel", triton_request().at("kernel"));
  EXPECT_THAT(parse_request(doc, Mode::compare).warnings,
              ElementsAre("kernel: unknown field, ignored"));
  EXPECT_STREQ(error_of(compare_request(), Mode::evaluate).what(),
               "kernel: required field is missing");
}

TEST(Compare, TensorTotalIsPerKernel) {
  Limits limits;
  limits.max_total_tensor_bytes = 8192; // x and y of one kernel: 4096 bytes each
  EXPECT_NO_THROW(parse_request(compare_request(), Mode::compare, limits));
  limits.max_total_tensor_bytes = 8191;
  EXPECT_EQ(error_of(compare_request(), Mode::compare, limits).path(),
            "ref_kernel.io.args[1].tensor_spec");
}

// ---- JSON text ----

TEST(JsonText, SyntaxErrorNamesLineAndColumn) {
  constexpr std::string_view kText = "{\n  \"kernel\": {\n    \"source_code\" \"x\"\n  }\n}";
  RequestError error = error_of_text(kText);
  EXPECT_EQ(error.path(), "");
  EXPECT_THAT(error.message(), HasSubstr("invalid JSON at line 3, column 19: "));
}

TEST(JsonText, TruncatedTextPointsAtItsEnd) {
  EXPECT_THAT(error_of_text("{\"kernel\": {").message(),
              HasSubstr("invalid JSON at line 1, column 13: "));
}

TEST(JsonText, TrailingGarbagePointsAtIt) {
  EXPECT_THAT(error_of_text("{}\n\n  x").message(),
              HasSubstr("invalid JSON at line 3, column 3: "));
}

TEST(JsonText, EmptyTextIsInvalid) {
  EXPECT_THAT(error_of_text("").message(), HasSubstr("invalid JSON at line 1, column 1"));
}

TEST(JsonText, NonFiniteLiteralsAreSyntaxErrors) {
  EXPECT_THAT(error_of_text(R"({"kernel": {}, "timeout": NaN})").message(),
              HasSubstr("invalid JSON at line 1, column 27"));
}

TEST(JsonText, TopLevelMustBeAnObject) {
  RequestError error = error_of_text("[1, 2]");
  EXPECT_EQ(error.path(), "");
  EXPECT_EQ(error.message(), "request must be a JSON object, got array");
}

TEST(JsonText, OversizedTextIsRejectedBeforeParsing) {
  Limits limits;
  limits.max_request_bytes = 10;
  RequestError error = error_of_text("{\"kernel\": 1}", Mode::evaluate, limits);
  EXPECT_EQ(error.message(), "request is 13 bytes, over the limit of 10 bytes");
}

std::string nested_metadata(size_t depth) {
  return R"({"kernel": {"source_code": "s", "kernel_type": "t", "metadata": {"deep": )" +
         std::string(depth, '[') + std::string(depth, ']') + "}}}";
}

TEST(JsonText, DeepNestingIsRejected) {
  // The metadata object sits at depth 3, so 61 arrays inside it reach 64: the limit.
  EXPECT_NO_THROW(parse_request_text(nested_metadata(61), Mode::evaluate));
  RequestError error = error_of_text(nested_metadata(62));
  EXPECT_EQ(error.path(), "");
  EXPECT_THAT(error.message(), HasSubstr("nested deeper than 64 levels"));
  EXPECT_THAT(error_of_text(nested_metadata(100000)).message(), HasSubstr("nested deeper"));
}

TEST(JsonText, DepthLimitIsConfigurable) {
  Limits limits;
  limits.max_json_depth = 4;
  EXPECT_THAT(error_of_text(nested_metadata(2), Mode::evaluate, limits).message(),
              HasSubstr("nested deeper than 4 levels"));
}

// ---- limits ----

TEST(Limits, SourceCodeSize) {
  Limits limits;
  limits.max_source_bytes = 16;
  json::value doc = with(minimal_request(), "/kernel/source_code", R"("0123456789abcdef")");
  EXPECT_NO_THROW(parse_request(doc, Mode::evaluate, limits));
  doc = with(minimal_request(), "/kernel/source_code", R"("0123456789abcdefg")");
  EXPECT_STREQ(error_of(doc, Mode::evaluate, limits).what(),
               "kernel.source_code: is 17 bytes, over the limit of 16 bytes");
}

TEST(Limits, ArgumentCount) {
  Limits limits;
  limits.max_args = 3;
  EXPECT_STREQ(error_of(triton_request(), Mode::evaluate, limits).what(),
               "kernel.io.args: has 4 entries, more than the limit of 3");
}

TEST(Limits, TensorBytes) {
  Limits limits;
  limits.max_tensor_bytes = 4095;
  EXPECT_STREQ(error_of(triton_request(), Mode::evaluate, limits).what(),
               "kernel.io.args[0].tensor_spec: tensor of shape [1024] float32 is 4096 bytes, over "
               "the limit of 4095 bytes per tensor");
}

TEST(Limits, TotalTensorBytesOfOneKernel) {
  Limits limits;
  limits.max_total_tensor_bytes = 6000;
  EXPECT_STREQ(error_of(triton_request(), Mode::evaluate, limits).what(),
               "kernel.io.args[1].tensor_spec: this tensor brings the kernel's tensors to 8192 "
               "bytes, over the limit of 6000 bytes for all tensors of one kernel");
}

TEST(Limits, Dimensions) {
  Limits limits;
  limits.max_ndim = 1;
  json::value doc = with(triton_request(), "/kernel/io/args/0/tensor_spec/shape", "[32, 32]");
  EXPECT_STREQ(error_of(doc, Mode::evaluate, limits).what(),
               "kernel.io.args[0].tensor_spec.shape: has 2 dimensions, more than the limit of 1");
}

TEST(Limits, LaunchDimension) {
  Limits limits;
  limits.max_launch_dim = 8;
  EXPECT_NO_THROW(parse_request(triton_request(), Mode::evaluate, limits));
  json::value doc = with(triton_request(), "/kernel/io/launch/grid", "[9]");
  EXPECT_STREQ(error_of(doc, Mode::evaluate, limits).what(),
               "kernel.io.launch.grid[0]: must be <= 8, got 9");
}

TEST(Limits, TrialCounts) {
  Limits limits;
  limits.max_num_trials = 10;
  limits.max_correctness_trials = 2;
  EXPECT_STREQ(
      error_of(with(minimal_request(), "/num_trials", "11"), Mode::evaluate, limits).what(),
      "num_trials: must be <= 10, got 11");
  EXPECT_STREQ(
      error_of(with(minimal_request(), "/num_correctness_trials", "3"), Mode::evaluate, limits)
          .what(),
      "num_correctness_trials: must be <= 2, got 3");
}

} // namespace
} // namespace keval::request::test
