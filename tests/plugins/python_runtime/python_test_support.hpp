// Helpers for the Python kernel types' tests: request builders, result accessors, and whether
// the interpreter keval embeds can import what a test needs.
#pragma once

#include "support/test_env.hpp"

#include <cstdlib>
#include <string>

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

namespace keval::test::python {

namespace json = boost::json;
using result::Verdict;

// The interpreter keval-worker embeds: $KEVAL_PYTHON, else the build's.
inline std::string embedded_python() {
  const char* chosen = std::getenv("KEVAL_PYTHON");
  return chosen != nullptr && chosen[0] != '\0' ? chosen : KEVAL_TEST_PYTHON_EXECUTABLE;
}

// "" when `python -c code` succeeds with the embedded interpreter, else why not.
inline std::string python_problem(const std::string& module) {
  const auto r = supervisor::run_command(embedded_python(), {"-c", "import " + module},
                                         std::chrono::seconds(120));
  if (r.exit_code && *r.exit_code == 0)
    return {};
  std::string why = r.err;
  const auto last = why.find_last_not_of("\n");
  why = why.substr(0, last == std::string::npos ? 0 : last + 1);
  const auto line = why.rfind('\n');
  return embedded_python() + " cannot import " + module + ": " +
         (line == std::string::npos ? why : why.substr(line + 1));
}

// Why torch-based tests cannot run here ("" when they can); computed once.
inline const std::string& torch_problem() {
  static const std::string problem = python_problem("torch");
  return problem;
}

inline json::object kernel(const std::string& type, const std::string& source,
                           json::object metadata = {}, const char* io = nullptr) {
  json::object k;
  k["source_code"] = source;
  k["kernel_type"] = type;
  if (!metadata.empty())
    k["metadata"] = std::move(metadata);
  if (io != nullptr)
    k["io"] = json::parse(io);
  return k;
}

inline json::object evaluate(json::object k, int64_t num_trials = 10) {
  return json::object{{"kernel", std::move(k)}, {"num_trials", num_trials}, {"timeout", 120}};
}

inline json::object compare(json::object ref, json::object custom, int64_t num_trials = 10) {
  return json::object{{"ref_kernel", std::move(ref)},
                      {"custom_kernel", std::move(custom)},
                      {"num_trials", num_trials},
                      {"timeout", 120}};
}

inline const json::object& exec(const result::Response& r) {
  return r.body.at("kernel_exec_result").as_object();
}

inline std::string text(const json::value& v) {
  return v.is_string() ? std::string(v.as_string()) : std::string();
}

inline std::string compilation_error(const result::Response& r) {
  return text(r.body.at("compilation_error"));
}

inline std::string validation_error(const result::Response& r) {
  return text(r.body.at("validation_error"));
}

// The custom side's compile info (metadata.compile.custom.info).
inline const json::object& custom_info(const result::Response& r) {
  return exec(r).at("metadata").at("compile").at("custom").at("info").as_object();
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Base fixture: skips, with the reason, when the embedded interpreter cannot import torch.
class TorchTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (!torch_problem().empty())
      GTEST_SKIP() << "torch not importable: " << torch_problem();
    ASSERT_NE(built_registry().find("torch"), nullptr) << "the torch plugin was not built";
  }
};

} // namespace keval::test::python
