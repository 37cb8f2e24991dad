// One malformed field at a time: each case edits the V2-contract Triton request at one JSON
// pointer and expects the exact path and the key part of the message.
#include "core/request/request_test_util.hpp"

#include <gmock/gmock.h>

namespace keval::request::test {
namespace {

using ::testing::HasSubstr;

struct FieldErrorCase {
  const char* name;
  const char* pointer;
  const char* replacement; // JSON text; nullptr removes the field
  const char* path;
  const char* message;
};

void PrintTo(const FieldErrorCase& c, std::ostream* os) {
  *os << c.name;
}

class FieldErrorTest : public ::testing::TestWithParam<FieldErrorCase> {};

TEST_P(FieldErrorTest, NamesPathAndProblem) {
  const FieldErrorCase& c = GetParam();
  json::value doc = c.replacement != nullptr ? with(triton_request(), c.pointer, c.replacement)
                                             : without(triton_request(), c.pointer);
  RequestError error = error_of(doc);
  EXPECT_EQ(error.path(), c.path);
  EXPECT_THAT(error.message(), HasSubstr(c.message));
  EXPECT_EQ(std::string(error.what()), std::string(c.path) + ": " + error.message());
}

#define ARG0 "/kernel/io/args/0"
#define SPEC ARG0 "/tensor_spec"
#define INIT SPEC "/init"
#define LAUNCH "/kernel/io/launch"
#define SPEC_PATH "kernel.io.args[0].tensor_spec"
// A two-element float32 tensor given as data; each case replaces one part of it.
#define DATA_SPEC(data) R"({"shape": [2], "dtype": "float32", "data": )" data "}"

const FieldErrorCase kTopLevel[] = {
    {"MissingKernel", "/kernel", nullptr, "kernel", "required field is missing"},
    {"KernelNotObject", "/kernel", R"("x")", "kernel", "must be an object, got string"},
    {"NumTrialsZero", "/num_trials", "0", "num_trials", "must be > 0, got 0"},
    {"NumTrialsOverLimit", "/num_trials", "100001", "num_trials", "must be <= 100000, got 100001"},
    {"NumTrialsFraction", "/num_trials", "2.5", "num_trials", "must be an integer, got 2.5"},
    {"NumTrialsString", "/num_trials", R"("10")", "num_trials", "must be an integer, got string"},
    {"TimeoutZero", "/timeout", "0", "timeout", "must be > 0, got 0"},
    {"TimeoutNegative", "/timeout", "-1.5", "timeout", "must be > 0, got -1.5"},
    {"TimeoutOverLimit", "/timeout", "86401", "timeout", "must be <= 86400, got 86401"},
    {"TimeoutString", "/timeout", R"("120")", "timeout", "must be a number, got string"},
    {"CorrectnessTrialsZero", "/num_correctness_trials", "0", "num_correctness_trials",
     "must be > 0, got 0"},
    {"CorrectnessTrialsOverLimit", "/num_correctness_trials", "1001", "num_correctness_trials",
     "must be <= 1000, got 1001"},
    {"AtolNegative", "/atol", "-0.1", "atol", "must be >= 0, got -0.1"},
    {"RtolString", "/rtol", R"("0.1")", "rtol", "must be a number, got string"},
    {"AsyncInteger", "/async", "1", "async", "must be a boolean, got integer"},
    {"JobIdEmpty", "/job_id", R"("")", "job_id", "must not be empty"},
    {"JobIdTooLong", "/job_id",
     R"("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")", "job_id",
     "has 65 characters, more than 64"},
    {"JobIdSlash", "/job_id", R"("a/b")", "job_id", "contains '/'"},
    {"JobIdDotDot", "/job_id", R"("..")", "job_id", "must not be '.' or '..'"},
    {"JobIdNumber", "/job_id", "5", "job_id", "must be a string, got integer"},
    {"SeedNegative", "/seed", "-1", "seed", "must be >= 0"},
    {"SeedString", "/seed", R"("42")", "seed", "got string"},
    {"StrictNumber", "/strict", "1", "strict", "must be true, false or a list of flag names"},
    {"StrictUnknownFlag", "/strict", R"(["precision", "fast"])", "strict[1]",
     "'fast' is not a flag; flags are excessive_speedup, library_only"},
    {"StrictEmptyName", "/strict", R"([""])", "strict[0]", "must not be empty"},
    {"MaxNoiseZero", "/max_noise", "0", "max_noise", "must be > 0 (percent), got 0"},
    {"MinSamplesZero", "/min_samples", "0", "min_samples", "must be > 0, got 0"},
    {"ThresholdAtOne", "/excessive_speedup_threshold", "1", "excessive_speedup_threshold",
     "must be > 1, got 1"},
    {"DeviceTraceString", "/device_trace", R"("no")", "device_trace", "got string"},
    {"UnknownFieldBeyondADouble", "/unknown_big", "8e322", "unknown_big",
     "must be a finite number"},
    {"HardwareTimeZero", "/hardware_time", "0", "hardware_time", "must be > 0, got 0"},
    {"HardwareTimeTooMany", "/hardware_time", "101", "hardware_time", "must be <= 100, got 101"},
    {"HardwareTimeFraction", "/hardware_time", "2.5", "hardware_time", "integer"},
    {"HardwareTimeString", "/hardware_time", R"("yes")", "hardware_time",
     "must be true, false or a number of runs (1 to 100), got string"},
};
INSTANTIATE_TEST_SUITE_P(TopLevel, FieldErrorTest, ::testing::ValuesIn(kTopLevel),
                         [](const auto& info) { return info.param.name; });

const FieldErrorCase kKernelCode[] = {
    {"SourceMissing", "/kernel/source_code", nullptr, "kernel.source_code",
     "required field is missing"},
    {"SourceNull", "/kernel/source_code", "null", "kernel.source_code", "required field is null"},
    {"SourceEmpty", "/kernel/source_code", R"("")", "kernel.source_code", "must not be empty"},
    {"SourceNumber", "/kernel/source_code", "5", "kernel.source_code",
     "must be a string, got integer"},
    {"SourceNul", "/kernel/source_code", R"("import torch\n#x\u0000rest")", "kernel.source_code",
     "contains a NUL byte at offset 15 (line 2, column 3): source code cannot contain NUL"},
    {"SourceNulFirst", "/kernel/source_code", R"("\u0000")", "kernel.source_code",
     "contains a NUL byte at offset 0 (line 1, column 1)"},
    {"KernelTypeMissing", "/kernel/kernel_type", nullptr, "kernel.kernel_type",
     "required field is missing"},
    {"KernelTypeEmpty", "/kernel/kernel_type", R"("")", "kernel.kernel_type", "must not be empty"},
    {"KernelTypeNul", "/kernel/kernel_type", R"("tri\u0000ton")", "kernel.kernel_type",
     "contains a NUL byte at offset 3"},
    {"MetadataArray", "/kernel/metadata", "[]", "kernel.metadata", "must be an object, got array"},
    {"IoString", "/kernel/io", R"("x")", "kernel.io", "must be an object, got string"},
    {"ArgsMissing", "/kernel/io/args", nullptr, "kernel.io.args", "required field is missing"},
    {"ArgsObject", "/kernel/io/args", "{}", "kernel.io.args", "must be an array, got object"},
    {"LaunchNumber", LAUNCH, "3", "kernel.io.launch", "must be an object, got integer"},
};
INSTANTIATE_TEST_SUITE_P(KernelCode, FieldErrorTest, ::testing::ValuesIn(kKernelCode),
                         [](const auto& info) { return info.param.name; });

const FieldErrorCase kArgSpec[] = {
    {"ArgNotObject", ARG0, "5", "kernel.io.args[0]", "must be an object, got integer"},
    {"NameMissing", ARG0 "/name", nullptr, "kernel.io.args[0].name", "required field is missing"},
    {"NameEmpty", ARG0 "/name", R"("")", "kernel.io.args[0].name", "must not be empty"},
    {"NameNul", ARG0 "/name", R"("x\u0000y")", "kernel.io.args[0].name",
     "contains a NUL byte at offset 1"},
    {"NameDuplicate", "/kernel/io/args/2/name", R"("x")", "kernel.io.args[2].name",
     "duplicate name 'x', already used by args[0]"},
    {"TypeMissing", ARG0 "/type", nullptr, "kernel.io.args[0].type", "required field is missing"},
    {"TypeUnknown", ARG0 "/type", R"("double")", "kernel.io.args[0].type",
     "unknown type 'double'; accepted: tensor, int, float, bool, str"},
    {"RoleUnknown", ARG0 "/role", R"("in")", "kernel.io.args[0].role",
     "unknown role 'in'; accepted: input, output, inout"},
    {"RoleOutputOnScalar", "/kernel/io/args/2/role", R"("output")", "kernel.io.args[2].role",
     "only tensor arguments can be output or inout; this argument is of type int"},
    {"RoleInoutOnScalar", "/kernel/io/args/2/role", R"("inout")", "kernel.io.args[2].role",
     "only tensor arguments can be output or inout"},
    {"IsMetaString", "/kernel/io/args/3/is_meta", R"("yes")", "kernel.io.args[3].is_meta",
     "must be a boolean, got string"},
    {"IsMetaOnTensor", ARG0 "/is_meta", "true", "kernel.io.args[0].is_meta",
     "only scalar arguments can be meta parameters"},
    {"TensorSpecMissing", SPEC, nullptr, SPEC_PATH, "required for a tensor argument"},
    {"TensorSpecOnScalar", "/kernel/io/args/2/tensor_spec", R"({"shape": [1]})",
     "kernel.io.args[2].tensor_spec", "only tensor arguments take a tensor_spec"},
    {"ValueMissing", "/kernel/io/args/2/value", nullptr, "kernel.io.args[2].value",
     "required for a scalar argument (type int)"},
    {"ValueNull", "/kernel/io/args/2/value", "null", "kernel.io.args[2].value",
     "required for a scalar argument (type int)"},
    {"IntValueString", "/kernel/io/args/2/value", R"("4")", "kernel.io.args[2].value",
     "must be an integer, got string"},
    {"IntValueFraction", "/kernel/io/args/2/value", "4.5", "kernel.io.args[2].value",
     "must be an integer, got 4.5"},
    {"IntValueBool", "/kernel/io/args/2/value", "true", "kernel.io.args[2].value",
     "must be an integer, got boolean"},
    {"FloatValueString", "/kernel/io/args/2", R"({"name": "alpha", "type": "float", "value": "x"})",
     "kernel.io.args[2].value", "must be a number, got string"},
    {"FloatValueInfinite", "/kernel/io/args/2",
     R"({"name": "alpha", "type": "float", "value": 1e999})", "kernel.io.args[2].value",
     "must be a finite number"},
    {"BoolValueInteger", "/kernel/io/args/2", R"({"name": "flag", "type": "bool", "value": 1})",
     "kernel.io.args[2].value", "must be a boolean, got integer"},
    {"StrValueNumber", "/kernel/io/args/2", R"({"name": "mode", "type": "str", "value": 3})",
     "kernel.io.args[2].value", "must be a string, got integer"},
};
INSTANTIATE_TEST_SUITE_P(ArgSpec, FieldErrorTest, ::testing::ValuesIn(kArgSpec),
                         [](const auto& info) { return info.param.name; });

const FieldErrorCase kTensorSpec[] = {
    {"SpecNotObject", SPEC, "[1024]", SPEC_PATH, "must be an object, got array"},
    {"ShapeMissing", SPEC "/shape", nullptr, SPEC_PATH ".shape", "required field is missing"},
    {"ShapeString", SPEC "/shape", R"("1024")", SPEC_PATH ".shape", "must be an array, got string"},
    {"ShapeZeroExtent", SPEC "/shape", "[1024, 0]", SPEC_PATH ".shape[1]", "must be > 0, got 0"},
    {"ShapeNegativeExtent", SPEC "/shape", "[-1]", SPEC_PATH ".shape[0]", "must be > 0, got -1"},
    {"ShapeFractionalExtent", SPEC "/shape", "[1.5]", SPEC_PATH ".shape[0]",
     "must be an integer, got 1.5"},
    {"ShapeStringExtent", SPEC "/shape", R"([2, "3"])", SPEC_PATH ".shape[1]",
     "must be an integer, got string"},
    {"ShapeTooManyDims", SPEC "/shape", "[1, 1, 1, 1, 1, 1, 1, 1, 1]", SPEC_PATH ".shape",
     "has 9 dimensions, more than the limit of 8"},
    {"DTypeUnknown", SPEC "/dtype", R"("complex64")", SPEC_PATH ".dtype",
     "unsupported dtype 'complex64'; accepted: float32, float16, bfloat16"},
    {"DTypeWrongCase", SPEC "/dtype", R"("Float32")", SPEC_PATH ".dtype",
     "unsupported dtype 'Float32'"},
    {"DTypeNumber", SPEC "/dtype", "32", SPEC_PATH ".dtype", "must be a string, got integer"},
    {"InitAndData", SPEC "/data", R"({"data_b64": ""})", SPEC_PATH,
     "init and data are mutually exclusive"},
    {"AbsurdShape", SPEC "/shape", "[1e6, 1e6, 1e6]", SPEC_PATH,
     "tensor of shape [1000000, 1000000, 1000000] float32 is 4000000000000000000 bytes, over the "
     "limit of 17179869184 bytes per tensor"},
    {"ShapeOverflowsInt64", SPEC "/shape", "[4611686018427387904, 4]", SPEC_PATH,
     "size overflows 64 bits, over the limit of 17179869184 bytes"},
    {"InitString", INIT, R"("randn")", SPEC_PATH ".init", "must be an object, got string"},
    {"InitKindMissing", INIT "/kind", nullptr, SPEC_PATH ".init.kind", "required field is missing"},
    {"InitKindUnknown", INIT "/kind", R"("normal")", SPEC_PATH ".init.kind",
     "unknown init kind 'normal'; accepted: randn, uniform, zeros, ones, full, arange"},
    {"SeedNegative", INIT "/seed", "-1", SPEC_PATH ".init.seed", "must be >= 0, got -1"},
    {"SeedFraction", INIT "/seed", "1.5", SPEC_PATH ".init.seed", "must be an integer, got 1.5"},
    {"SeedOverUint64", INIT "/seed", "18446744073709551616", SPEC_PATH ".init.seed",
     "is out of the uint64 range"},
    {"SeedString", INIT "/seed", R"("42")", SPEC_PATH ".init.seed",
     "must be an integer, got string"},
    {"RandnStdNegative", INIT "/std", "-1", SPEC_PATH ".init.std", "must be >= 0, got -1"},
    {"RandnMeanString", INIT "/mean", R"("0")", SPEC_PATH ".init.mean",
     "must be a number, got string"},
    {"RandnMeanInfinite", INIT "/mean", "1e999", SPEC_PATH ".init.mean", "must be a finite number"},
    {"UniformLowEqualsHigh", INIT, R"({"kind": "uniform", "low": 1, "high": 1})", SPEC_PATH ".init",
     "low (1) must be less than high (1)"},
    {"UniformLowAboveDefaultHigh", INIT, R"({"kind": "uniform", "low": 2.5})", SPEC_PATH ".init",
     "low (2.5) must be less than high (1)"},
    {"FullWithoutFillValue", INIT, R"({"kind": "full"})", SPEC_PATH ".init.fill_value",
     "required for init kind 'full'"},
    {"ArangeStepZero", INIT, R"({"kind": "arange", "step": 0})", SPEC_PATH ".init.step",
     "must not be 0"},
};
INSTANTIATE_TEST_SUITE_P(TensorSpec, FieldErrorTest, ::testing::ValuesIn(kTensorSpec),
                         [](const auto& info) { return info.param.name; });

const FieldErrorCase kTensorData[] = {
    {"DataString", SPEC, DATA_SPEC(R"("AAAA")"), SPEC_PATH ".data",
     "must be an object, got string"},
    {"DataB64Missing", SPEC, DATA_SPEC(R"({"compress": "none"})"), SPEC_PATH ".data.data_b64",
     "required field is missing"},
    {"DataB64Number", SPEC, DATA_SPEC(R"({"data_b64": 5})"), SPEC_PATH ".data.data_b64",
     "must be a string, got integer"},
    {"DataB64BadCharacter", SPEC, DATA_SPEC(R"({"data_b64": "AAAA!AAAAAA="})"),
     SPEC_PATH ".data.data_b64", "invalid base64: unexpected character '!' at offset 4"},
    {"DataB64BadPadding", SPEC, DATA_SPEC(R"({"data_b64": "AAAAAAAAAAA=="})"),
     SPEC_PATH ".data.data_b64", "invalid base64: wrong amount of padding"},
    {"DataWrongSize", SPEC, DATA_SPEC(R"({"data_b64": "AAAA"})"), SPEC_PATH ".data.data_b64",
     "decoded data is 3 bytes, but shape [2] float32 needs 8 bytes"},
    {"CompressUnknown", SPEC, DATA_SPEC(R"({"data_b64": "AAAAAAAAAAA=", "compress": "gzip"})"),
     SPEC_PATH ".data.compress", "unsupported compression 'gzip'; accepted: zlib, none"},
    {"CompressNumber", SPEC, DATA_SPEC(R"({"data_b64": "AAAAAAAAAAA=", "compress": 1})"),
     SPEC_PATH ".data.compress", "must be a string, got integer"},
    {"ZlibNotZlib", SPEC, DATA_SPEC(R"({"data_b64": "AAAAAAAAAAA=", "compress": "zlib"})"),
     SPEC_PATH ".data.data_b64", "zlib data is corrupt"},
    {"DataShapeDiffers", SPEC, DATA_SPEC(R"({"data_b64": "AAAAAAAAAAA=", "shape": [1, 2]})"),
     SPEC_PATH ".data.shape", "[1, 2] differs from the tensor_spec shape [2]"},
    {"DataDTypeDiffers", SPEC, DATA_SPEC(R"({"data_b64": "AAAAAAAAAAA=", "dtype": "half"})"),
     SPEC_PATH ".data.dtype", "float16 differs from the tensor_spec dtype float32"},
    {"DataDTypeUnknown", SPEC, DATA_SPEC(R"({"data_b64": "AAAAAAAAAAA=", "dtype": "fp8"})"),
     SPEC_PATH ".data.dtype", "unsupported dtype 'fp8'"},
};
INSTANTIATE_TEST_SUITE_P(TensorData, FieldErrorTest, ::testing::ValuesIn(kTensorData),
                         [](const auto& info) { return info.param.name; });

const FieldErrorCase kLaunch[] = {
    {"GridObjectZero", LAUNCH "/grid", R"({"x": 0})", "kernel.io.launch.grid.x",
     "must be > 0, got 0"},
    {"GridObjectString", LAUNCH "/grid", R"({"x": 8, "y": "2"})", "kernel.io.launch.grid.y",
     "must be an integer, got string"},
    {"GridArrayZero", LAUNCH "/grid", "[8, 0]", "kernel.io.launch.grid[1]", "must be > 0, got 0"},
    {"GridArrayEmpty", LAUNCH "/grid", "[]", "kernel.io.launch.grid",
     "must have 1 to 3 entries (x, y, z), got 0"},
    {"GridArrayFour", LAUNCH "/grid", "[1, 2, 3, 4]", "kernel.io.launch.grid",
     "must have 1 to 3 entries (x, y, z), got 4"},
    {"GridString", LAUNCH "/grid", R"("8")", "kernel.io.launch.grid",
     "must be an object {x, y, z}, an array of 1 to 3 integers, or an integer; got string"},
    {"GridOverLimit", LAUNCH "/grid", "2147483648", "kernel.io.launch.grid",
     "must be <= 2147483647, got 2147483648"},
    {"BlockNegative", LAUNCH "/block", R"({"z": -1})", "kernel.io.launch.block.z",
     "must be > 0, got -1"},
    {"NumWarpsNotPowerOfTwo", LAUNCH "/num_warps", "3", "kernel.io.launch.num_warps",
     "must be a power of two from 1 to 64, got 3"},
    {"NumWarpsTooMany", LAUNCH "/num_warps", "128", "kernel.io.launch.num_warps",
     "must be a power of two from 1 to 64, got 128"},
    {"NumWarpsZero", LAUNCH "/num_warps", "0", "kernel.io.launch.num_warps",
     "must be a power of two from 1 to 64, got 0"},
    {"NumStagesZero", LAUNCH "/num_stages", "0", "kernel.io.launch.num_stages",
     "must be > 0, got 0"},
    {"SharedMemNegative", LAUNCH "/shared_mem_bytes", "-1", "kernel.io.launch.shared_mem_bytes",
     "must be >= 0, got -1"},
};
INSTANTIATE_TEST_SUITE_P(Launch, FieldErrorTest, ::testing::ValuesIn(kLaunch),
                         [](const auto& info) { return info.param.name; });

// The table's base request must itself be valid, or every case above proves nothing.
TEST(FieldErrorBase, SeedTritonRequestIsValid) {
  EvalRequest request = parse_request(triton_request(), Mode::evaluate);
  EXPECT_TRUE(request.warnings.empty());
  EXPECT_EQ(request.kernel.io->args.size(), 4u);
}

} // namespace
} // namespace keval::request::test
