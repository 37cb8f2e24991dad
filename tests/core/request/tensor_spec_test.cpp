// TensorSpec, TensorInit and TensorData: accepted forms, warnings, and client data decoding
// (raw, zlib, zlib bombs).
#include "core/request/request_test_util.hpp"

#include <gmock/gmock.h>

namespace keval::request::test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

struct ParsedTensor {
  TensorSpec spec;
  std::vector<std::string> warnings;
};

// Parses `spec_text` as the tensor_spec of one input (or `role`) tensor argument "t", decoding
// its data as the worker does (or only checking it, as the host does).
ParsedTensor parse_spec(std::string_view spec_text, std::string_view role = "input",
                        const Limits& limits = {},
                        TensorDataDecoding decoding = TensorDataDecoding::decode) {
  std::string io = R"({"args": [{"name": "t", "type": "tensor", "role": ")" + std::string(role) +
                   R"(", "tensor_spec": )" + std::string(spec_text) + "}]}";
  ParsedTensor parsed;
  IOContract contract =
      parse_io_contract(json::parse(io), "io", limits, &parsed.warnings, decoding);
  parsed.spec = contract.args.at(0).tensor_spec.value();
  return parsed;
}

RequestError spec_error(std::string_view spec_text, const Limits& limits = {},
                        TensorDataDecoding decoding = TensorDataDecoding::decode) {
  try {
    parse_spec(spec_text, "input", limits, decoding);
  } catch (const RequestError& error) {
    return error;
  }
  ADD_FAILURE() << "expected a RequestError for " << spec_text;
  return RequestError("<none>", "<none>");
}

// ---- shape and dtype ----

TEST(TensorSpec, DTypeDefaultsToFloat32) {
  ParsedTensor parsed = parse_spec(R"({"shape": [2, 3]})");
  EXPECT_EQ(parsed.spec.dtype, DType::f32);
  EXPECT_EQ(parsed.spec.numel(), 6);
  EXPECT_EQ(parsed.spec.nbytes(), 24u);
  EXPECT_FALSE(parsed.spec.init.has_value());
  EXPECT_FALSE(parsed.spec.data.has_value());
}

TEST(TensorSpec, EmptyShapeIsAScalarTensor) {
  ParsedTensor parsed = parse_spec(R"({"shape": [], "dtype": "int64"})");
  EXPECT_TRUE(parsed.spec.shape.empty());
  EXPECT_EQ(parsed.spec.numel(), 1);
  EXPECT_EQ(parsed.spec.nbytes(), 8u);
}

TEST(TensorSpec, ExtentsMayBeIntegralDoubles) {
  EXPECT_EQ(parse_spec(R"({"shape": [1e3, 2.0]})").spec.shape, (std::vector<int64_t>{1000, 2}));
}

TEST(TensorSpec, EightDimensionsAreAccepted) {
  EXPECT_EQ(parse_spec(R"({"shape": [1, 2, 1, 2, 1, 2, 1, 2]})").spec.numel(), 16);
}

TEST(TensorSpec, DTypeNamesAndAliases) {
  const std::pair<const char*, DType> cases[] = {
      {"float32", DType::f32},       {"float", DType::f32},
      {"torch.float32", DType::f32}, {"float16", DType::f16},
      {"half", DType::f16},          {"torch.half", DType::f16},
      {"bfloat16", DType::bf16},     {"torch.bfloat16", DType::bf16},
      {"float64", DType::f64},       {"double", DType::f64},
      {"int8", DType::i8},           {"int16", DType::i16},
      {"short", DType::i16},         {"int32", DType::i32},
      {"int", DType::i32},           {"int64", DType::i64},
      {"long", DType::i64},          {"torch.long", DType::i64},
      {"uint8", DType::u8},          {"byte", DType::u8},
      {"bool", DType::boolean},      {"torch.bool", DType::boolean},
  };
  for (auto [name, dtype] : cases) {
    std::string spec = R"({"shape": [4], "dtype": ")" + std::string(name) + "\"}";
    EXPECT_EQ(parse_spec(spec).spec.dtype, dtype) << name;
  }
}

TEST(TensorSpec, UnsupportedDTypeListsTheAcceptedNames) {
  RequestError error = spec_error(R"({"shape": [4], "dtype": "torch.complex64"})");
  EXPECT_EQ(error.path(), "io.args[0].tensor_spec.dtype");
  EXPECT_THAT(error.message(), HasSubstr("unsupported dtype 'torch.complex64'; accepted: float32, "
                                         "float16, bfloat16, float64, int8, int16, int32, int64, "
                                         "uint8, bool"));
}

TEST(TensorSpec, SizeUsesTheDType) {
  Limits limits;
  limits.max_tensor_bytes = 2048;
  EXPECT_NO_THROW(parse_spec(R"({"shape": [1024], "dtype": "bfloat16"})", "input", limits));
  EXPECT_THAT(spec_error(R"({"shape": [1024], "dtype": "int32"})", limits).message(),
              HasSubstr("is 4096 bytes, over the limit of 2048 bytes per tensor"));
}

TEST(TensorSpec, AbsurdShapeIsRejectedBeforeAnyAllocation) {
  RequestError error = spec_error(R"({"shape": [1e6, 1e6, 1e6], "init": {"kind": "zeros"}})");
  EXPECT_EQ(error.path(), "io.args[0].tensor_spec");
  EXPECT_THAT(error.message(), HasSubstr("4000000000000000000 bytes, over the limit of "
                                         "17179869184 bytes per tensor"));
}

// ---- init ----

TEST(TensorInit, RandnWithParameters) {
  ParsedTensor parsed = parse_spec(
      R"({"shape": [32, 64], "init": {"kind": "randn", "seed": 42, "mean": 0.5, "std": 2}})");
  const TensorInit& init = parsed.spec.init.value();
  EXPECT_EQ(init.kind, InitKind::randn);
  EXPECT_EQ(init.seed, 42u);
  EXPECT_EQ(init.mean, 0.5);
  EXPECT_EQ(init.std, 2.0);
  EXPECT_THAT(parsed.warnings, IsEmpty());
}

TEST(TensorInit, RandnStdZeroIsAllowed) {
  EXPECT_EQ(parse_spec(R"({"shape": [4], "init": {"kind": "randn", "std": 0}})").spec.init->std,
            0.0);
}

TEST(TensorInit, SeedMayBeAbsentOrTheFullUint64Range) {
  EXPECT_FALSE(
      parse_spec(R"({"shape": [4], "init": {"kind": "randn"}})").spec.init->seed.has_value());
  EXPECT_EQ(parse_spec(R"({"shape": [4], "init": {"kind": "randn", "seed": 0}})").spec.init->seed,
            0u);
  EXPECT_EQ(
      parse_spec(R"({"shape": [4], "init": {"kind": "uniform", "seed": 18446744073709551615}})")
          .spec.init->seed,
      UINT64_MAX);
}

TEST(TensorInit, SeedingExampleOfSeed000) {
  std::vector<std::string> warnings;
  IOContract io = parse_io_contract(json::parse(R"({
    "args": [
      {
        "name": "input",
        "type": "tensor",
        "tensor_spec": {
          "shape": [32, 64],
          "dtype": "float32",
          "init": {"kind": "randn", "seed": 42, "mean": 0.0, "std": 1.0}
        }
      },
      {
        "name": "weights",
        "type": "tensor",
        "tensor_spec": {
          "shape": [64, 128],
          "dtype": "float32",
          "init": {"kind": "uniform", "seed": 123, "low": -0.5, "high": 0.5}
        }
      }
    ]
  })"),
                                    "io", {}, &warnings);
  EXPECT_THAT(warnings, IsEmpty());
  const TensorInit& uniform = io.args[1].tensor_spec->init.value();
  EXPECT_EQ(uniform.kind, InitKind::uniform);
  EXPECT_EQ(uniform.seed, 123u);
  EXPECT_EQ(uniform.low, -0.5);
  EXPECT_EQ(uniform.high, 0.5);
}

TEST(TensorInit, FullAndArange) {
  TensorInit full = parse_spec(R"({"shape": [4], "init": {"kind": "full", "fill_value": -3.25}})")
                        .spec.init.value();
  EXPECT_EQ(full.kind, InitKind::full);
  EXPECT_EQ(full.fill_value, -3.25);
  TensorInit arange =
      parse_spec(R"({"shape": [4], "init": {"kind": "arange", "start": 10, "step": -0.5}})")
          .spec.init.value();
  EXPECT_EQ(arange.kind, InitKind::arange);
  EXPECT_EQ(arange.start, 10.0);
  EXPECT_EQ(arange.step, -0.5);
}

TEST(TensorInit, EveryKindWorksForIntegerAndBoolDTypes) {
  for (const char* dtype : {"int8", "int64", "uint8", "bool"})
    for (const char* init :
         {R"({"kind": "randn"})", R"({"kind": "uniform"})", R"({"kind": "zeros"})",
          R"({"kind": "ones"})", R"({"kind": "full", "fill_value": 1})", R"({"kind": "arange"})"}) {
      std::string spec =
          R"({"shape": [4], "dtype": ")" + std::string(dtype) + R"(", "init": )" + init + "}";
      EXPECT_NO_THROW(parse_spec(spec)) << spec;
    }
}

TEST(TensorInit, ParametersOfOtherKindsAreWarnings) {
  ParsedTensor parsed = parse_spec(
      R"({"shape": [4], "init": {"kind": "zeros", "seed": 1, "std": 2, "fill_value": 3}})");
  EXPECT_EQ(parsed.spec.init->kind, InitKind::zeros);
  EXPECT_THAT(
      parsed.warnings,
      ElementsAre("io.args[0].tensor_spec.init.seed: not used by init kind 'zeros', ignored",
                  "io.args[0].tensor_spec.init.std: not used by init kind 'zeros', ignored",
                  "io.args[0].tensor_spec.init.fill_value: not used by init kind 'zeros', "
                  "ignored"));
}

TEST(TensorInit, NullParametersAreNotGiven) {
  // pydantic's .dict() of TensorInit(kind="ones") writes every parameter, unset ones as null.
  ParsedTensor parsed = parse_spec(R"({"shape": [4], "init": {"kind": "ones", "seed": null,
      "mean": null, "std": null, "low": null, "high": null, "fill_value": null, "start": null,
      "step": null}})");
  EXPECT_EQ(parsed.spec.init->kind, InitKind::ones);
  EXPECT_THAT(parsed.warnings, IsEmpty());
}

TEST(TensorInit, UnusedParametersMustStillBeNumbers) {
  RequestError error = spec_error(R"({"shape": [4], "init": {"kind": "zeros", "low": "a"}})");
  EXPECT_EQ(error.path(), "io.args[0].tensor_spec.init.low");
  EXPECT_THAT(error.message(), HasSubstr("must be a number, got string"));
}

TEST(TensorInit, ChecksOnlyTheChosenKind) {
  // std < 0 matters only to randn, step == 0 only to arange.
  ParsedTensor parsed =
      parse_spec(R"({"shape": [4], "init": {"kind": "uniform", "std": -1, "step": 0}})");
  EXPECT_EQ(parsed.warnings.size(), 2u);
}

// ---- output tensors ----

TEST(OutputTensor, InitIsIgnoredWithWarning) {
  ParsedTensor parsed = parse_spec(R"({"shape": [4], "init": {"kind": "ones"}})", "output");
  EXPECT_FALSE(parsed.spec.init.has_value());
  EXPECT_THAT(parsed.warnings,
              ElementsAre("io.args[0].tensor_spec.init: ignored: the tensor's role is output"));
}

TEST(OutputTensor, DataIsValidatedThenIgnoredWithWarning) {
  ParsedTensor parsed = parse_spec(R"({"shape": [1], "data": {"data_b64": "AAAAAA=="}})", "output");
  EXPECT_FALSE(parsed.spec.data.has_value());
  EXPECT_THAT(parsed.warnings,
              ElementsAre("io.args[0].tensor_spec.data: ignored: the tensor's role is output"));
  EXPECT_THROW(parse_spec(R"({"shape": [1], "data": {"data_b64": "AA"}})", "output"), RequestError);
}

TEST(OutputTensor, InoutKeepsItsInit) {
  ParsedTensor parsed = parse_spec(R"({"shape": [4], "init": {"kind": "ones"}})", "inout");
  ASSERT_TRUE(parsed.spec.init.has_value());
  EXPECT_THAT(parsed.warnings, IsEmpty());
}

// ---- data ----

std::string data_spec(std::string_view shape, std::string_view data_fields) {
  return R"({"shape": )" + std::string(shape) + R"(, "dtype": "float32", "data": {)" +
         std::string(data_fields) + "}}";
}

TEST(TensorData, RawBase64RoundTrips) {
  std::vector<uint8_t> bytes = float_ramp_bytes(6);
  ParsedTensor parsed =
      parse_spec(data_spec("[2, 3]", R"("data_b64": ")" + encode_base64(bytes) + "\""));
  ASSERT_TRUE(parsed.spec.data.has_value());
  EXPECT_EQ(parsed.spec.data->bytes, bytes);
  EXPECT_EQ(parsed.spec.data->compress, "");
}

TEST(TensorData, ZlibRoundTrips) {
  std::vector<uint8_t> bytes = float_ramp_bytes(1000);
  std::string fields = R"("data_b64": ")" + encode_base64(zlib_compress(bytes)) +
                       R"(", "compress": "zlib", "shape": [10, 100], "dtype": "float")";
  ParsedTensor parsed = parse_spec(data_spec("[10, 100]", fields));
  EXPECT_EQ(parsed.spec.data->bytes, bytes);
  EXPECT_EQ(parsed.spec.data->compress, "zlib");
  EXPECT_THAT(parsed.warnings, IsEmpty());
}

TEST(TensorData, CompressNoneAndNullMeanRaw) {
  std::string base64 = encode_base64(float_ramp_bytes(2));
  for (const char* compress : {R"("none")", "null"}) {
    std::string fields = R"("data_b64": ")" + base64 + R"(", "compress": )" + compress;
    ParsedTensor parsed = parse_spec(data_spec("[2]", fields));
    EXPECT_EQ(parsed.spec.data->bytes, float_ramp_bytes(2)) << compress;
    EXPECT_EQ(parsed.spec.data->compress, "") << compress;
  }
}

TEST(TensorData, Base64MayBeWrappedAndUnpadded) {
  // 8 bytes: "AAAAAAAAAAA=" wrapped MIME-style, then without its padding.
  EXPECT_EQ(parse_spec(data_spec("[2]", R"("data_b64": "AAAAAA\nAAAAA=\n")")).spec.data->bytes,
            std::vector<uint8_t>(8, 0));
  EXPECT_EQ(parse_spec(data_spec("[2]", R"("data_b64": "AAAAAAAAAAA")")).spec.data->bytes,
            std::vector<uint8_t>(8, 0));
}

TEST(TensorData, ZlibSizeMismatchNamesBothSizes) {
  std::string fields = R"("data_b64": ")" + encode_base64(zlib_compress(float_ramp_bytes(3))) +
                       R"(", "compress": "zlib")";
  RequestError error = spec_error(data_spec("[4]", fields));
  EXPECT_EQ(error.path(), "io.args[0].tensor_spec.data.data_b64");
  EXPECT_EQ(error.message(), "decoded data is 12 bytes, but shape [4] float32 needs 16 bytes");
}

// ---- what the host checks without decoding (TensorDataDecoding::check) ----

TEST(TensorDataCheck, ValidDataIsCheckedNotDecoded) {
  const auto raw = float_ramp_bytes(6);
  EXPECT_TRUE(parse_spec(data_spec("[6]", R"("data_b64": ")" + encode_base64(raw) + R"(")"),
                         "input", {}, TensorDataDecoding::check)
                  .spec.data->bytes.empty());
  // 64 MiB of zeros in about 64 KiB: checked through a fixed buffer, never inflated whole.
  const std::vector<uint8_t> zeros(64u << 20, 0);
  const std::string fields =
      R"("data_b64": ")" + encode_base64(zlib_compress(zeros)) + R"(", "compress": "zlib")";
  const ParsedTensor parsed =
      parse_spec(data_spec("[16777216]", fields), "input", {}, TensorDataDecoding::check);
  ASSERT_TRUE(parsed.spec.data.has_value());
  EXPECT_TRUE(parsed.spec.data->bytes.empty());
  EXPECT_EQ(parsed.spec.data->compress, "zlib");
}

TEST(TensorDataCheck, WhatCanBeSeenWithoutInflatingIsRefused) {
  auto check_error = [](const std::string& shape, const std::string& fields) {
    return spec_error(data_spec(shape, fields), {}, TensorDataDecoding::check).message();
  };
  // Raw data has its size in its length.
  EXPECT_EQ(check_error("[4]", R"("data_b64": ")" + encode_base64(float_ramp_bytes(3)) + R"(")"),
            "decoded data is 12 bytes, but shape [4] float32 needs 16 bytes");
  EXPECT_THAT(check_error("[4]", R"("data_b64": "AAAA!AAA")"), HasSubstr("invalid base64"));
  // zlib: the header, and what a short stream inflates to.
  EXPECT_THAT(check_error("[2]", R"("data_b64": "AAAAAAAAAAA=", "compress": "zlib")"),
              HasSubstr("zlib data is corrupt"));
  const std::string short_stream = R"("data_b64": ")" +
                                   encode_base64(zlib_compress(float_ramp_bytes(3))) +
                                   R"(", "compress": "zlib")";
  EXPECT_EQ(check_error("[4]", short_stream),
            "zlib data inflates to only 12 bytes (shape [4] float32 needs 16 bytes)");
  // A claim no deflate stream of that length can meet: at most 1032 bytes out per byte in.
  const std::vector<uint8_t> small = zlib_compress(std::vector<uint8_t>(4096, 0));
  EXPECT_THAT(check_error("[1073741824]",
                          R"("data_b64": ")" + encode_base64(small) + R"(", "compress": "zlib")"),
              HasSubstr("too few to inflate to 4294967296 bytes (deflate expands at most 1032"));
}

TEST(TensorData, ZlibTruncatedStream) {
  std::vector<uint8_t> compressed = zlib_compress(float_ramp_bytes(256));
  compressed.resize(compressed.size() / 2);
  std::string fields = R"("data_b64": ")" + encode_base64(compressed) + R"(", "compress": "zlib")";
  EXPECT_THAT(spec_error(data_spec("[256]", fields)).message(),
              HasSubstr("zlib data is truncated"));
}

TEST(TensorData, ZlibBombIsRejectedAtTheCap) {
  // 100 MB of zeros deflate to about 100 KB; the tensor declares 64 bytes. Inflation stops at
  // the declared size (by construction, see detail/zlib_inflate.hpp), so the bomb is never
  // expanded; the message proves the cap was what stopped it.
  const std::vector<uint8_t> zeros(100u << 20, 0);
  const std::vector<uint8_t> compressed = zlib_compress(zeros);
  std::string fields = R"("data_b64": ")" + encode_base64(compressed) + R"(", "compress": "zlib")";
  const RequestError error = spec_error(data_spec("[16]", fields));
  EXPECT_EQ(error.path(), "io.args[0].tensor_spec.data.data_b64");
  EXPECT_THAT(error.message(), HasSubstr("zlib data inflates to more than 64 bytes (shape [16] "
                                         "float32 needs 64 bytes)"));
}

TEST(TensorData, DataChargesTheSizeLimitBeforeDecoding) {
  Limits limits;
  limits.max_tensor_bytes = 4;
  RequestError error = spec_error(data_spec("[2]", R"("data_b64": "not base64 at all!")"), limits);
  EXPECT_EQ(error.path(), "io.args[0].tensor_spec");
  EXPECT_THAT(error.message(), HasSubstr("over the limit of 4 bytes per tensor"));
}

} // namespace
} // namespace keval::request::test
