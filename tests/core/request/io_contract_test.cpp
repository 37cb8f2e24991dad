// IOContract: arguments, scalar values, launch configuration and the warnings they raise.
#include "core/request/request_test_util.hpp"

#include <gmock/gmock.h>

namespace keval::request::test {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

IOContract parse_io_text(std::string_view text, std::vector<std::string>* warnings = nullptr,
                         const Limits& limits = {}) {
  return parse_io_contract(json::parse(text), "io", limits, warnings);
}

ArgSpec parse_single_arg(std::string_view arg_text, std::vector<std::string>* warnings = nullptr) {
  IOContract io = parse_io_text(R"({"args": [)" + std::string(arg_text) + "]}", warnings);
  return io.args.at(0);
}

// ---- args ----

TEST(IOContract, EmptyArgsAreAccepted) {
  IOContract io = parse_io_text(R"({"args": []})");
  EXPECT_THAT(io.args, IsEmpty());
  EXPECT_FALSE(io.launch.has_value());
}

TEST(IOContract, PathArgumentPrefixesErrors) {
  try {
    parse_io_contract(json::parse(R"({"args": [{"type": "int", "value": 1}]})"), "custom.io");
    FAIL() << "expected a RequestError";
  } catch (const RequestError& error) {
    EXPECT_EQ(error.path(), "custom.io.args[0].name");
  }
}

TEST(IOContract, ArgumentOrderIsKept) {
  IOContract io = parse_io_text(R"({"args": [
    {"name": "c", "type": "int", "value": 1},
    {"name": "a", "type": "float", "value": 2.5},
    {"name": "b", "type": "bool", "value": false}]})");
  ASSERT_EQ(io.args.size(), 3u);
  EXPECT_EQ(io.args[0].name, "c");
  EXPECT_EQ(io.args[1].name, "a");
  EXPECT_EQ(io.args[2].name, "b");
}

TEST(ArgSpec, RolesOfTensors) {
  for (auto [text, role] : {std::pair{"input", Role::input}, std::pair{"output", Role::output},
                            std::pair{"inout", Role::inout}}) {
    ArgSpec arg = parse_single_arg(R"({"name": "t", "type": "tensor", "role": ")" +
                                   std::string(text) + R"(", "tensor_spec": {"shape": [4]}})");
    EXPECT_EQ(arg.role, role) << text;
    EXPECT_STREQ(role_name(arg.role), text);
  }
}

TEST(ArgSpec, ScalarMayBeExplicitInputAndMeta) {
  ArgSpec arg = parse_single_arg(
      R"({"name": "BLOCK", "type": "int", "value": 256, "role": "input", "is_meta": true})");
  EXPECT_EQ(arg.role, Role::input);
  EXPECT_TRUE(arg.is_meta);
  EXPECT_FALSE(arg.tensor_spec.has_value());
}

TEST(ArgSpec, IntValueKeepsIntegersAndNormalizesIntegralDoubles) {
  EXPECT_EQ(parse_single_arg(R"({"name": "n", "type": "int", "value": -7})").value,
            json::value(-7));
  ArgSpec from_double = parse_single_arg(R"({"name": "n", "type": "int", "value": 4.0})");
  ASSERT_TRUE(from_double.value.is_int64());
  EXPECT_EQ(from_double.value.get_int64(), 4);
  ArgSpec huge = parse_single_arg(R"({"name": "n", "type": "int", "value": 18446744073709551615})");
  ASSERT_TRUE(huge.value.is_uint64());
  EXPECT_EQ(huge.value.get_uint64(), UINT64_MAX);
}

TEST(ArgSpec, FloatValueKeepsItsJsonForm) {
  ArgSpec integer = parse_single_arg(R"({"name": "a", "type": "float", "value": 2})");
  EXPECT_TRUE(integer.value.is_int64());
  ArgSpec fraction = parse_single_arg(R"({"name": "a", "type": "float", "value": 0.25})");
  EXPECT_EQ(fraction.value, json::value(0.25));
}

TEST(ArgSpec, BoolAndStrValues) {
  EXPECT_EQ(parse_single_arg(R"({"name": "b", "type": "bool", "value": true})").value,
            json::value(true));
  EXPECT_EQ(parse_single_arg(R"({"name": "s", "type": "str", "value": ""})").value,
            json::value(""));
}

TEST(ArgSpec, ValueOnTensorIsIgnoredWithWarning) {
  std::vector<std::string> warnings;
  ArgSpec arg = parse_single_arg(
      R"({"name": "t", "type": "tensor", "value": 3, "tensor_spec": {"shape": [4]}})", &warnings);
  EXPECT_TRUE(arg.value.is_null());
  EXPECT_THAT(warnings, ElementsAre("io.args[0].value: ignored for a tensor argument"));
}

TEST(ArgSpec, IsMetaFalseOnTensorIsFine) {
  std::vector<std::string> warnings;
  ArgSpec arg = parse_single_arg(
      R"({"name": "t", "type": "tensor", "is_meta": false, "tensor_spec": {"shape": [4]}})",
      &warnings);
  EXPECT_FALSE(arg.is_meta);
  EXPECT_THAT(warnings, IsEmpty());
}

TEST(ArgSpec, NamesAreCaseSensitiveForUniqueness) {
  IOContract io = parse_io_text(R"({"args": [
    {"name": "x", "type": "int", "value": 1}, {"name": "X", "type": "int", "value": 2}]})");
  EXPECT_EQ(io.args.size(), 2u);
}

// ---- launch ----

LaunchConfig parse_launch_text(std::string_view launch_text,
                               std::vector<std::string>* warnings = nullptr) {
  return parse_io_text(R"({"args": [], "launch": )" + std::string(launch_text) + "}", warnings)
      .launch.value();
}

void expect_dim(const std::optional<LaunchDim>& dim, int64_t x, int64_t y, int64_t z) {
  ASSERT_TRUE(dim.has_value());
  EXPECT_EQ(dim->x, x);
  EXPECT_EQ(dim->y, y);
  EXPECT_EQ(dim->z, z);
}

TEST(Launch, DimAsObjectDefaultsMissingComponentsToOne) {
  LaunchConfig launch = parse_launch_text(R"({"grid": {"y": 3}, "block": {"x": 128, "z": 2}})");
  expect_dim(launch.grid, 1, 3, 1);
  expect_dim(launch.block, 128, 1, 2);
}

TEST(Launch, DimAsArrayOfOneToThree) {
  expect_dim(parse_launch_text(R"({"grid": [4]})").grid, 4, 1, 1);
  expect_dim(parse_launch_text(R"({"grid": [4, 5]})").grid, 4, 5, 1);
  expect_dim(parse_launch_text(R"({"grid": [4, 5, 6]})").grid, 4, 5, 6);
}

TEST(Launch, DimAsInteger) {
  expect_dim(parse_launch_text(R"({"grid": 16, "block": 256.0})").grid, 16, 1, 1);
  expect_dim(parse_launch_text(R"({"block": 256.0})").block, 256, 1, 1);
}

TEST(Launch, DimAcceptsTheLimit) {
  expect_dim(parse_launch_text(R"({"grid": [2147483647, 65535, 65535]})").grid, 2147483647, 65535,
             65535);
}

TEST(Launch, NumWarpsPowersOfTwo) {
  for (int64_t warps : {1, 2, 4, 8, 16, 32, 64})
    EXPECT_EQ(parse_launch_text(R"({"num_warps": )" + std::to_string(warps) + "}").num_warps,
              warps);
}

TEST(Launch, StagesAndSharedMemory) {
  LaunchConfig launch = parse_launch_text(R"({"num_stages": 1, "shared_mem_bytes": 0})");
  EXPECT_EQ(launch.num_stages, 1);
  EXPECT_EQ(launch.shared_mem_bytes, 0);
  EXPECT_EQ(parse_launch_text(R"({"shared_mem_bytes": 49152})").shared_mem_bytes, 49152);
}

TEST(Launch, EmptyObjectLeavesEverythingUnset) {
  LaunchConfig launch = parse_launch_text("{}");
  EXPECT_FALSE(launch.grid.has_value());
  EXPECT_FALSE(launch.block.has_value());
  EXPECT_FALSE(launch.num_warps.has_value());
  EXPECT_FALSE(launch.num_stages.has_value());
  EXPECT_FALSE(launch.shared_mem_bytes.has_value());
}

// ---- unknown fields ----

TEST(Warnings, UnknownFieldsAtEveryLevel) {
  std::vector<std::string> warnings;
  parse_io_text(R"({
    "args": [{"name": "t", "type": "tensor", "shape_hint": 1,
              "tensor_spec": {"shape": [4], "layout": "C",
                              "init": {"kind": "zeros", "device": "cuda"}}},
             {"name": "d", "type": "tensor",
              "tensor_spec": {"shape": [1], "data": {"data_b64": "AAAAAA==", "checksum": 0}}}],
    "launch": {"grid": {"x": 1, "w": 2}, "kernel_name": "k"},
    "version": 2})",
                &warnings);
  EXPECT_THAT(warnings, ElementsAre("io.args[0].tensor_spec.init.device: unknown field, ignored",
                                    "io.args[0].tensor_spec.layout: unknown field, ignored",
                                    "io.args[0].shape_hint: unknown field, ignored",
                                    "io.args[1].tensor_spec.data.checksum: unknown field, ignored",
                                    "io.launch.grid.w: unknown field, ignored",
                                    "io.launch.kernel_name: unknown field, ignored",
                                    "io.version: unknown field, ignored"));
}

TEST(Warnings, ParseIoContractWithoutSinkStillParses) {
  IOContract io = parse_io_text(R"({"args": [], "extra": 1})");
  EXPECT_THAT(io.args, IsEmpty());
}

} // namespace
} // namespace keval::request::test
