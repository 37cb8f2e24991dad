// The trusted worker's builds for a candidate's load_inline (issue 11): what a build_request may
// hold (each bad field named by its path), what its key covers (everything the builder reads),
// and that a request it cannot serve is answered, never cached and never fatal. The build itself
// runs on the GPU machine (tests/gpu/torch_cuda_end_to_end_test.cpp).
#include "worker/pipeline/extension_builds.hpp"

#include <functional>
#include <stdexcept>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include "support/test_env.hpp"

namespace keval::worker {
namespace {

namespace json = boost::json;

json::object request() {
  return json::parse(R"({"type": "build_request", "kind": "torch_cuda_extension",
    "module": "add_0123456789abcdef",
    "toolchain": {"torch": "2.11.0", "arch": 90, "defines": ["-DA"]},
    "extension": {"name": "add", "cpp_units": [["main.cpp", "int f();"]],
                  "cuda_units": [["cuda.cu", "__global__ void g() {}"]],
                  "extra_cflags": ["-O3"], "extra_cuda_cflags": [], "extra_ldflags": [],
                  "with_cuda": true}})")
      .as_object();
}

std::string refusal(const std::function<void(json::object&)>& change) {
  json::object r = request();
  change(r);
  return parse_extension_request(r).error;
}

json::object& ext(json::object& r) {
  return r["extension"].as_object();
}

TEST(ExtensionRequest, AWellFormedRequestIsTaken) {
  const ParsedExtensionRequest parsed = parse_extension_request(request());
  ASSERT_TRUE(parsed.request) << parsed.error;
  EXPECT_EQ(parsed.request->module, "add_0123456789abcdef");
  EXPECT_EQ(parsed.request->extension.at("name"), "add");
}

TEST(ExtensionRequest, EachBadFieldIsNamedByItsPath) {
  EXPECT_EQ(refusal([](json::object& r) { r["kind"] = "cuda"; }),
            "build_request.kind: must be \"torch_cuda_extension\"");
  EXPECT_EQ(
      refusal([](json::object& r) { r["module"] = "../x"; }).rfind("build_request.module:", 0), 0u);
  EXPECT_EQ(
      refusal([](json::object& r) { r["module"] = "9lives"; }).rfind("build_request.module:", 0),
      0u);
  EXPECT_EQ(refusal([](json::object& r) { r["toolchain"] = "x"; }),
            "build_request.toolchain: must be an object");
  EXPECT_EQ(refusal([](json::object& r) { r.erase("extension"); }),
            "build_request.extension: must be an object");
  EXPECT_EQ(refusal([](json::object& r) { ext(r)["extra_include_paths"] = json::array{"/x"}; }),
            "build_request.extension.extra_include_paths: not a field the builder takes");
  EXPECT_EQ(refusal([](json::object& r) {
              ext(r)["name"] = 3;
            }).rfind("build_request.extension.name:", 0),
            0u);
  EXPECT_EQ(refusal([](json::object& r) {
              ext(r)["cuda_units"] = json::parse(R"([["cuda.cu", "a"], ["x.cu"]])");
            }),
            "build_request.extension.cuda_units[1]: must be a [file name, text] pair");
  EXPECT_EQ(refusal([](json::object& r) {
              ext(r)["cpp_units"] = json::parse(R"([["../../etc/x.cpp", "a"]])");
            }).rfind("build_request.extension.cpp_units[0][0]:", 0),
            0u);
  EXPECT_EQ(refusal([](json::object& r) {
              ext(r)["cpp_units"] = json::parse(R"([[".hidden", "a"]])");
            }).rfind("build_request.extension.cpp_units[0][0]:", 0),
            0u);
  EXPECT_EQ(refusal([](json::object& r) {
              ext(r)["extra_ldflags"] = json::array{"-lm", 7};
            }),
            "build_request.extension.extra_ldflags[1]: must be a string");
  EXPECT_EQ(refusal([](json::object& r) { ext(r).erase("extra_cuda_cflags"); }),
            "build_request.extension.extra_cuda_cflags: must be an array of strings");
  EXPECT_EQ(refusal([](json::object& r) { ext(r)["with_cuda"] = 1; }),
            "build_request.extension.with_cuda: must be true or false");
  EXPECT_EQ(refusal([](json::object& r) {
              ext(r)["cuda_units"] = json::array{
                  json::array{"cuda.cu", std::string(kMaxExtensionRequestBytes + 1, 'x')}};
            }),
            "build_request.extension: units and flags hold more than 16 MiB");
}

std::string key_of(const json::object& r, int arch = 90) {
  const ParsedExtensionRequest parsed = parse_extension_request(r);
  EXPECT_TRUE(parsed.request) << parsed.error;
  return parsed.request ? extension_key(*parsed.request, arch) : std::string();
}

TEST(ExtensionRequest, TheKeyIsTheContentNotTheOrderItWasWrittenIn) {
  const json::object reordered = json::parse(R"({"extension": {"with_cuda": true,
      "extra_ldflags": [], "extra_cuda_cflags": [], "extra_cflags": ["-O3"],
      "cuda_units": [["cuda.cu", "__global__ void g() {}"]],
      "cpp_units": [["main.cpp", "int f();"]], "name": "add"},
    "toolchain": {"defines": ["-DA"], "arch": 90, "torch": "2.11.0"},
    "module": "add_0123456789abcdef", "kind": "torch_cuda_extension", "type": "build_request"})")
                                     .as_object();
  EXPECT_EQ(key_of(request()), key_of(reordered));
  EXPECT_EQ(key_of(request()).size(), 64u);
}

TEST(ExtensionRequest, EverythingTheBuilderReadsChangesTheKey) {
  const std::string base = key_of(request());
  const std::vector<std::function<void(json::object&)>> changes{
      [](json::object& r) { r["module"] = "add_fedcba9876543210"; },
      [](json::object& r) { r["toolchain"].as_object()["torch"] = "2.12.0"; },
      [](json::object& r) { r["toolchain"].as_object()["defines"] = json::array{"-DB"}; },
      [](json::object& r) { ext(r)["name"] = "add2"; },
      [](json::object& r) { ext(r)["cpp_units"] = json::parse(R"([["main.cpp", "int f(); "]])"); },
      [](json::object& r) {
        ext(r)["cuda_units"] = json::parse(R"([["k.cu", "__global__ void g() {}"]])");
      },
      [](json::object& r) { ext(r)["extra_cflags"] = json::array{"-O2"}; },
      [](json::object& r) { ext(r)["extra_cuda_cflags"] = json::array{"-lineinfo"}; },
      [](json::object& r) { ext(r)["extra_ldflags"] = json::array{"-lcublas"}; },
      [](json::object& r) { ext(r)["with_cuda"] = false; },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    json::object r = request();
    changes[i](r);
    EXPECT_NE(key_of(r), base) << "change " << i;
  }
  EXPECT_NE(key_of(request(), 80), base) << "the architecture";
}

// A RunnerSource whose builder never starts (as when the machine is out of processes).
class NoBuilder : public RunnerSource {
public:
  std::unique_ptr<RunnerClient> take(const std::string& side) override {
    taken.push_back(side);
    throw std::runtime_error("fork: Resource temporarily unavailable");
  }
  json::object hello_of(const RunnerClient&) override { return {}; }
  std::unique_ptr<Engine> prepared_engine(const std::string&, int) override { return nullptr; }
  bool opens_cuda_engine_ahead() const override { return false; }
  std::vector<std::string> taken;
};

TEST(ExtensionBuildsAnswer, AMalformedRequestIsRefusedWithoutStartingABuilder) {
  keval::test::TempDir tmp;
  NoBuilder runners;
  ExtensionBuilds builds(runners, "/plugins/torch_cuda.so", 90, tmp.path() / "cache", "");
  json::object r = request();
  r["module"] = "not a module";
  const RunnerClient::Answer answer = builds.answer(r);
  EXPECT_EQ(answer.reply.at("ok"), false);
  EXPECT_EQ(std::string(answer.reply.at("refused").as_string()).rfind("build_request.module:", 0),
            0u);
  EXPECT_TRUE(answer.fds.empty());
  EXPECT_TRUE(runners.taken.empty());
}

TEST(ExtensionBuildsAnswer, ABuilderThatCannotStartIsUnavailableAndNothingIsKept) {
  keval::test::TempDir tmp;
  NoBuilder runners;
  ExtensionBuilds builds(runners, "/plugins/torch_cuda.so", 90, tmp.path() / "cache", "");
  for (int attempt = 0; attempt < 2; ++attempt) {
    const RunnerClient::Answer answer = builds.answer(request());
    EXPECT_EQ(answer.reply.at("ok"), false);
    EXPECT_NE(std::string(answer.reply.at("unavailable").as_string())
                  .find("the builder could not start: fork: Resource temporarily unavailable"),
              std::string::npos)
        << json::serialize(answer.reply);
    EXPECT_TRUE(answer.fds.empty());
  }
  // Nothing was kept: the second request asked for a builder again, as a "build" runner.
  EXPECT_EQ(runners.taken, (std::vector<std::string>{"build", "build"}));
}

TEST(ExtensionBuildsAnswer, WithoutAnArchitectureNothingIsBuilt) {
  keval::test::TempDir tmp;
  NoBuilder runners;
  ExtensionBuilds builds(runners, "/plugins/torch_cuda.so", 0, tmp.path() / "cache", "");
  const RunnerClient::Answer answer = builds.answer(request());
  EXPECT_EQ(answer.reply.at("unavailable"), "no GPU architecture is known to build for");
  EXPECT_TRUE(runners.taken.empty());
}

} // namespace
} // namespace keval::worker
