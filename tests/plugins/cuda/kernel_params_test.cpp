// From keval_args to cuLaunchKernel's parameter array: declared types, metadata.arg_types,
// fitting to the kernel's parameter sizes, and the bytes each slot holds.
#include "cuda_test_support.hpp"

#include "cuda_plugin/detail/kernel_params.hpp"

#include <cstring>

#include <gmock/gmock.h>

namespace keval::cuda_plugin::test {
namespace {

using detail::ArgKind;
using detail::ContractArg;
using detail::KernelParam;
using detail::PackedParams;
using detail::ParamType;
using ::testing::HasSubstr;

boost::json::object metadata(const char* text) {
  return boost::json::parse(text).as_object();
}

const std::vector<ContractArg> kArgs = {
    {"x", ArgKind::tensor, false},     {"BLOCK", ArgKind::int_, true},
    {"out", ArgKind::tensor, false},   {"n", ArgKind::int_, false},
    {"alpha", ArgKind::float_, false}, {"flag", ArgKind::bool_, false}};

// keval_args as the worker builds them, pointing into storage this object owns.
struct LaunchArgs {
  keval_dl_tensor x{}, out{};
  std::vector<keval_arg> args;

  LaunchArgs(int64_t n = 1000, double alpha = 0.25, bool flag = true) {
    x.data = reinterpret_cast<void*>(0x7f0000001000);
    x.device = {KEVAL_DEVICE_CUDA, 0};
    out.data = reinterpret_cast<void*>(0x7f0000200000);
    out.byte_offset = 64;
    out.device = {KEVAL_DEVICE_CUDA, 0};
    args.push_back(tensor("x", &x));
    args.push_back(scalar("BLOCK", KEVAL_ARG_INT, 128, 0, true));
    args.push_back(tensor("out", &out));
    args.push_back(scalar("n", KEVAL_ARG_INT, n, 0));
    args.push_back(scalar("alpha", KEVAL_ARG_FLOAT, 0, alpha));
    args.push_back(scalar("flag", KEVAL_ARG_BOOL, flag ? 1 : 0, 0));
  }
  static keval_arg tensor(const char* name, keval_dl_tensor* t) {
    keval_arg a{};
    a.struct_size = sizeof a;
    a.name = name;
    a.kind = KEVAL_ARG_TENSOR;
    a.tensor = t;
    return a;
  }
  static keval_arg scalar(const char* name, int32_t kind, int64_t i, double f, bool meta = false) {
    keval_arg a{};
    a.struct_size = sizeof a;
    a.name = name;
    a.kind = kind;
    a.int_value = i;
    a.float_value = f;
    a.is_meta = meta ? 1 : 0;
    return a;
  }
};

template <class T> T read_slot(const PackedParams& p, size_t i) {
  T value;
  std::memcpy(&value, p.slot(i).data(), sizeof value);
  return value;
}

TEST(KernelParams, DefaultsSkipMetaArgumentsAndUseNarrowScalars) {
  const auto params = detail::declare_params(kArgs, {});
  ASSERT_EQ(params.size(), 5u) << "BLOCK is is_meta: not passed";
  EXPECT_EQ(params[0].type, ParamType::device_pointer);
  EXPECT_EQ(params[1].name, "out");
  EXPECT_EQ(params[2].type, ParamType::int32);
  EXPECT_EQ(params[3].type, ParamType::float32);
  EXPECT_EQ(params[4].type, ParamType::boolean);
  for (const auto& p : params)
    EXPECT_FALSE(p.pinned);
}

TEST(KernelParams, PacksTensorsAsDevicePointersAndScalarsInTheirWidths) {
  const auto params = detail::declare_params(kArgs, {});
  LaunchArgs launch;
  PackedParams packed;
  detail::pack_params(params, launch.args.data(), launch.args.size(), packed);
  ASSERT_EQ(packed.size(), 5u);
  void** pointers = packed.pointers();
  for (size_t i = 0; i < packed.size(); ++i)
    EXPECT_EQ(pointers[i], static_cast<const void*>(packed.slot(i).data()));
  EXPECT_EQ(read_slot<uint64_t>(packed, 0), 0x7f0000001000u);
  EXPECT_EQ(read_slot<uint64_t>(packed, 1), 0x7f0000200000u + 64) << "byte_offset is added";
  EXPECT_EQ(read_slot<int32_t>(packed, 2), 1000);
  EXPECT_EQ(read_slot<uint64_t>(packed, 2), 1000u) << "the rest of the slot is zero";
  EXPECT_EQ(read_slot<float>(packed, 3), 0.25f);
  EXPECT_EQ(read_slot<uint8_t>(packed, 4), 1);
}

TEST(KernelParams, RepackingReusesTheSameSlots) {
  const auto params = detail::declare_params(kArgs, {});
  PackedParams packed;
  LaunchArgs first(1000);
  detail::pack_params(params, first.args.data(), first.args.size(), packed);
  void** pointers = packed.pointers();
  LaunchArgs second(-7, -1.5, false);
  detail::pack_params(params, second.args.data(), second.args.size(), packed);
  EXPECT_EQ(packed.pointers(), pointers);
  EXPECT_EQ(read_slot<int32_t>(packed, 2), -7);
  EXPECT_EQ(read_slot<float>(packed, 3), -1.5f);
  EXPECT_EQ(read_slot<uint8_t>(packed, 4), 0);
}

TEST(KernelParams, ArgTypesPinScalarTypes) {
  auto params = detail::declare_params(
      kArgs, metadata(R"({"arg_types": {"n": "int64", "alpha": "float64"}})"));
  EXPECT_EQ(params[2].type, ParamType::int64);
  EXPECT_TRUE(params[2].pinned);
  EXPECT_EQ(params[3].type, ParamType::float64);
  LaunchArgs launch(int64_t{5} << 33, 0.1);
  PackedParams packed;
  detail::pack_params(params, launch.args.data(), launch.args.size(), packed);
  EXPECT_EQ(read_slot<int64_t>(packed, 2), int64_t{5} << 33);
  EXPECT_EQ(read_slot<double>(packed, 3), 0.1) << "float64 keeps every bit of the value";
}

TEST(KernelParams, UnsignedTypes) {
  auto params = detail::declare_params(kArgs, metadata(R"({"arg_types": {"n": "uint32"}})"));
  LaunchArgs big(4000000000);
  PackedParams packed;
  detail::pack_params(params, big.args.data(), big.args.size(), packed);
  EXPECT_EQ(read_slot<uint32_t>(packed, 2), 4000000000u);
  LaunchArgs negative(-1);
  EXPECT_EQ(error_of([&] {
              detail::pack_params(params, negative.args.data(), negative.args.size(), packed);
            }).code(),
            KEVAL_ERROR_INVALID_REQUEST);
  params = detail::declare_params(kArgs, metadata(R"({"arg_types": {"n": "uint64"}})"));
  detail::pack_params(params, big.args.data(), big.args.size(), packed);
  EXPECT_EQ(read_slot<uint64_t>(packed, 2), 4000000000u);
}

TEST(KernelParams, AValueBeyondInt32IsRejectedNotTruncated) {
  const auto params = detail::declare_params(kArgs, {});
  LaunchArgs launch(int64_t{1} << 32);
  PackedParams packed;
  const auto e = error_of(
      [&] { detail::pack_params(params, launch.args.data(), launch.args.size(), packed); });
  EXPECT_EQ(e.code(), KEVAL_ERROR_INVALID_REQUEST);
  EXPECT_THAT(e.what(), HasSubstr("'n' = 4294967296 does not fit int32"));
}

TEST(KernelParams, ArgTypesErrors) {
  auto error = [](const char* text) {
    return error_of([&] { detail::declare_params(kArgs, metadata(text)); });
  };
  EXPECT_THAT(error(R"({"arg_types": ["n"]})").what(), HasSubstr("must be an object"));
  EXPECT_THAT(error(R"({"arg_types": {"m": "int64"}})").what(), HasSubstr("no argument 'm'"));
  EXPECT_THAT(error(R"({"arg_types": {"BLOCK": "int64"}})").what(), HasSubstr("is_meta"));
  EXPECT_THAT(error(R"({"arg_types": {"n": "float64"}})").what(),
              HasSubstr("int32, uint32, int64 or uint64"));
  EXPECT_THAT(error(R"({"arg_types": {"alpha": "int64"}})").what(),
              HasSubstr("float32 or float64"));
  EXPECT_THAT(error(R"({"arg_types": {"x": "int64"}})").what(), HasSubstr("tensor"));
  EXPECT_THAT(error(R"({"arg_types": {"n": 64}})").what(), HasSubstr("must be a string"));
  EXPECT_EQ(error(R"({"arg_types": {"n": "int128"}})").code(), KEVAL_ERROR_INVALID_REQUEST);
}

TEST(KernelParams, StrArgumentsCannotBePassed) {
  const std::vector<ContractArg> args = {{"mode", ArgKind::str, false}};
  const auto e = error_of([&] { detail::declare_params(args, {}); });
  EXPECT_EQ(e.code(), KEVAL_ERROR_INVALID_REQUEST);
  EXPECT_THAT(e.what(), HasSubstr("str arguments cannot be passed to a CUDA kernel"));
  // A str is_meta argument is simply not passed.
  EXPECT_TRUE(detail::declare_params({{"mode", ArgKind::str, true}}, {}).empty());

  // And at launch, should one arrive anyway.
  keval_arg a = LaunchArgs::scalar("mode", KEVAL_ARG_STR, 0, 0);
  a.str_value = "fast";
  PackedParams packed;
  EXPECT_THAT(error_of([&] { detail::pack_params({}, &a, 1, packed); }).what(),
              HasSubstr("str arguments cannot be passed to a CUDA kernel"));
}

TEST(KernelParams, ArgumentsThatDoNotMatchTheCompiledContractAreRejected) {
  const auto params = detail::declare_params(kArgs, {});
  PackedParams packed;
  LaunchArgs launch;
  // One argument short (the reference side of a compare without outputs, say).
  auto e = error_of(
      [&] { detail::pack_params(params, launch.args.data(), launch.args.size() - 1, packed); });
  EXPECT_EQ(e.code(), KEVAL_ERROR_INVALID_REQUEST);
  EXPECT_THAT(e.what(), HasSubstr("compiled for 5"));
  // Reordered.
  std::swap(launch.args[3], launch.args[4]);
  EXPECT_THAT(error_of([&] {
                detail::pack_params(params, launch.args.data(), launch.args.size(), packed);
              }).what(),
              HasSubstr("compiled for 'n'"));
  // A host tensor.
  LaunchArgs host;
  host.x.device.device_type = KEVAL_DEVICE_CPU;
  EXPECT_THAT(error_of([&] {
                detail::pack_params(params, host.args.data(), host.args.size(), packed);
              }).what(),
              HasSubstr("not in CUDA device memory"));
}

TEST(KernelParams, ScalarsTakeTheKernelsWidths) {
  auto params = detail::declare_params(kArgs, {});
  // float* x, float* out, long n, double alpha, int flag
  detail::fit_params_to_kernel(params, {8, 8, 8, 8, 4}, "k");
  EXPECT_EQ(params[2].type, ParamType::int64);
  EXPECT_EQ(params[3].type, ParamType::float64);
  EXPECT_EQ(params[4].type, ParamType::int32);
  LaunchArgs launch(-3, 2.5, true);
  PackedParams packed;
  detail::pack_params(params, launch.args.data(), launch.args.size(), packed);
  EXPECT_EQ(read_slot<int64_t>(packed, 2), -3) << "sign-extended to 64 bits";
  EXPECT_EQ(read_slot<double>(packed, 3), 2.5);
  EXPECT_EQ(read_slot<int32_t>(packed, 4), 1);

  params = detail::declare_params(kArgs, {});
  detail::fit_params_to_kernel(params, {8, 8, 4, 4, 1}, "k");
  EXPECT_EQ(params[2].type, ParamType::int32);
  EXPECT_EQ(params[3].type, ParamType::float32);
  EXPECT_EQ(params[4].type, ParamType::boolean);
}

TEST(KernelParams, KernelsThatCannotTakeTheArgumentsAreRejected) {
  auto fit_error = [](const std::vector<size_t>& sizes, const char* meta = "{}") {
    auto params = detail::declare_params(kArgs, metadata(meta));
    return error_of([&] { detail::fit_params_to_kernel(params, sizes, "vector_add"); });
  };
  auto e = fit_error({8, 8, 4});
  EXPECT_EQ(e.code(), KEVAL_ERROR_INVALID_REQUEST);
  EXPECT_THAT(e.what(), HasSubstr("kernel 'vector_add' takes 3 parameters, but the IOContract "
                                  "passes 5 (x, out, n, alpha, flag"));
  EXPECT_THAT(fit_error({4, 8, 4, 4, 1}).what(), HasSubstr("'x' (tensor"));
  EXPECT_THAT(fit_error({8, 8, 2, 4, 1}).what(), HasSubstr("parameter 2 of kernel 'vector_add'"));
  EXPECT_THAT(fit_error({8, 8, 4, 2, 1}).what(), HasSubstr("'alpha'"));
  EXPECT_THAT(fit_error({8, 8, 4, 4, 1}, R"({"arg_types": {"n": "int64"}})").what(),
              HasSubstr("metadata.arg_types makes 'n' int64 (8 bytes)"));
}

TEST(KernelParams, AKernelWithoutParameters) {
  std::vector<KernelParam> params;
  detail::fit_params_to_kernel(params, {}, "k");
  PackedParams packed;
  detail::pack_params(params, nullptr, 0, packed);
  EXPECT_EQ(packed.size(), 0u);
  EXPECT_EQ(packed.pointers(), nullptr);
}

TEST(KernelParams, CompileRejectsBadArgTypesBeforeCompiling) {
  Source s{"never compiled"};
  s.metadata = R"({"arg_types": {"nope": "int64"}})";
  EXPECT_EQ(compile_error(s).code(), KEVAL_ERROR_INVALID_REQUEST);
}

} // namespace
} // namespace keval::cuda_plugin::test
