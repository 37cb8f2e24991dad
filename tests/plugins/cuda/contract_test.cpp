// The launch configuration and argument list read from the IOContract.
#include "cuda_test_support.hpp"

#include "cuda_plugin/detail/contract.hpp"

#include <gmock/gmock.h>

namespace keval::cuda_plugin::test {
namespace {

using detail::ArgKind;
using detail::parse_contract;
using ::testing::HasSubstr;

std::string with_launch(const std::string& launch) {
  return R"({"args": [], "launch": )" + launch + "}";
}

detail::LaunchConfig launch_of(const std::string& launch) {
  return parse_contract(with_launch(launch).c_str()).launch;
}

sdk::Error launch_error(const std::string& launch) {
  return error_of([&] { launch_of(launch); });
}

TEST(LaunchConfig, ObjectsWithMissingComponentsDefaultToOne) {
  const auto l = launch_of(R"({"grid": {"x": 8, "y": 2}, "block": {"x": 128, "z": 2}})");
  EXPECT_EQ(l.grid.x, 8u);
  EXPECT_EQ(l.grid.y, 2u);
  EXPECT_EQ(l.grid.z, 1u);
  EXPECT_EQ(l.block.x, 128u);
  EXPECT_EQ(l.block.y, 1u);
  EXPECT_EQ(l.block.z, 2u);
  EXPECT_EQ(l.shared_mem_bytes, 0u);
}

TEST(LaunchConfig, ArraysAndIntegersAsTheRequestParserAccepts) {
  const auto l = launch_of(R"({"grid": [4, 3, 2], "block": 256})");
  EXPECT_EQ(l.grid.x, 4u);
  EXPECT_EQ(l.grid.y, 3u);
  EXPECT_EQ(l.grid.z, 2u);
  EXPECT_EQ(l.block.x, 256u);
  EXPECT_EQ(l.block.y, 1u);
  const auto partial = launch_of(R"({"grid": [7], "block": [32, 4]})");
  EXPECT_EQ(partial.grid.x, 7u);
  EXPECT_EQ(partial.grid.y, 1u);
  EXPECT_EQ(partial.block.y, 4u);
}

TEST(LaunchConfig, DynamicSharedMemory) {
  EXPECT_EQ(launch_of(R"({"grid": 1, "block": 1, "shared_mem_bytes": 100000})").shared_mem_bytes,
            100000u);
  EXPECT_EQ(launch_of(R"({"grid": 1, "block": 1, "shared_mem_bytes": 0})").shared_mem_bytes, 0u);
  EXPECT_EQ(launch_of(R"({"grid": 1, "block": 1, "shared_mem_bytes": null})").shared_mem_bytes, 0u);
  EXPECT_EQ(launch_error(R"({"grid": 1, "block": 1, "shared_mem_bytes": -1})").code(),
            KEVAL_ERROR_INVALID_REQUEST);
}

TEST(LaunchConfig, GridAndBlockAreRequired) {
  for (const char* io : {R"({"args": []})", R"({"args": [], "launch": {"grid": 4}})",
                         R"({"args": [], "launch": {"block": 4}})",
                         R"({"args": [], "launch": {"grid": null, "block": 4}})"}) {
    const auto e = error_of([&] { parse_contract(io); });
    EXPECT_EQ(e.code(), KEVAL_ERROR_INVALID_REQUEST) << io;
    EXPECT_STREQ(e.what(), "cuda kernels need io.launch.grid and io.launch.block") << io;
  }
  const auto e = error_of([] { parse_contract(nullptr); });
  EXPECT_EQ(e.code(), KEVAL_ERROR_INVALID_REQUEST);
  EXPECT_THAT(e.what(), HasSubstr("io.launch.grid and io.launch.block"));
}

TEST(LaunchConfig, MalformedExtentsAreRejectedWithTheirPath) {
  EXPECT_THAT(launch_error(R"({"grid": {"x": 0}, "block": 1})").what(),
              HasSubstr("io.launch.grid.x"));
  EXPECT_THAT(launch_error(R"({"grid": 1, "block": [1, 2, 3, 4]})").what(),
              HasSubstr("1 to 3 entries"));
  EXPECT_THAT(launch_error(R"({"grid": 1, "block": [32, "a"]})").what(),
              HasSubstr("io.launch.block[1]"));
  EXPECT_THAT(launch_error(R"({"grid": "big", "block": 1})").what(), HasSubstr("io.launch.grid"));
  EXPECT_THAT(launch_error(R"({"grid": 1.5, "block": 1})").what(), HasSubstr("io.launch.grid"));
}

TEST(LaunchConfig, ExtentsBeyondCudaLimitsAreRejected) {
  EXPECT_THAT(launch_error(R"({"grid": 1, "block": 2048})").what(), HasSubstr("(1024, 1024, 64)"));
  EXPECT_THAT(launch_error(R"({"grid": 1, "block": [64, 32]})").what(), HasSubstr("2048 threads"));
  EXPECT_THAT(launch_error(R"({"grid": [1, 70000], "block": 1})").what(), HasSubstr("65535"));
  EXPECT_THAT(launch_error(R"({"grid": 4294967295, "block": 1})").what(), HasSubstr("2^31 - 1"));
  // The largest legal shapes pass.
  const auto l = launch_of(R"({"grid": [2147483647, 65535, 65535], "block": [1024]})");
  EXPECT_EQ(l.grid.x, 2147483647u);
  EXPECT_EQ(launch_of(R"({"grid": 1, "block": [16, 16, 4]})").block.z, 4u);
}

TEST(LaunchConfig, ReadsArgumentsInOrderWithKindsAndMeta) {
  const auto c = parse_contract(R"({"args": [
      {"name": "x", "type": "tensor", "tensor_spec": {"shape": [4]}},
      {"name": "n", "type": "int", "value": 4},
      {"name": "alpha", "type": "float", "value": 0.5},
      {"name": "flag", "type": "bool", "value": true},
      {"name": "BLOCK", "type": "int", "value": 128, "is_meta": true},
      {"name": "mode", "type": "str", "value": "fast"}],
    "launch": {"grid": 1, "block": 1}})");
  ASSERT_EQ(c.args.size(), 6u);
  EXPECT_EQ(c.args[0].name, "x");
  EXPECT_EQ(c.args[0].kind, ArgKind::tensor);
  EXPECT_EQ(c.args[1].kind, ArgKind::int_);
  EXPECT_EQ(c.args[2].kind, ArgKind::float_);
  EXPECT_EQ(c.args[3].kind, ArgKind::bool_);
  EXPECT_TRUE(c.args[4].is_meta);
  EXPECT_EQ(c.args[5].kind, ArgKind::str);
  EXPECT_FALSE(c.kernel_name.has_value());
}

TEST(LaunchConfig, CompileRejectsABadContractBeforeCompiling) {
  Source s{"this is not CUDA and is never compiled"};
  s.io = R"({"args": [], "launch": {"grid": 1}})";
  EXPECT_EQ(compile_error(s).code(), KEVAL_ERROR_INVALID_REQUEST);
  s.io.clear(); // no IOContract at all
  EXPECT_EQ(compile_error(s).code(), KEVAL_ERROR_INVALID_REQUEST);
}

TEST(LaunchConfig, CompiledKernelsCarryTheirLaunch) {
  Source s{R"(extern "C" __global__ void k(float* x, float* out, int n) { out[0] = x[0]; })"};
  s.io = R"({"args": [
      {"name": "x", "type": "tensor", "tensor_spec": {"shape": [4]}},
      {"name": "out", "type": "tensor", "role": "output", "tensor_spec": {"shape": [4]}},
      {"name": "n", "type": "int", "value": 4}],
    "launch": {"grid": [2, 3], "block": {"x": 64, "y": 2}, "shared_mem_bytes": 65536}})";
  const CompiledKernel k = compile(s);
  EXPECT_EQ(k.launch.grid.y, 3u);
  EXPECT_EQ(k.launch.block.y, 2u);
  EXPECT_EQ(k.launch.shared_mem_bytes, 65536u);
  const auto launch = info_of(k).at("launch").as_object();
  EXPECT_EQ(boost::json::serialize(launch.at("grid")), "[2,3,1]");
  EXPECT_EQ(launch.at("shared_mem_bytes").to_number<int>(), 65536);
}

} // namespace
} // namespace keval::cuda_plugin::test
