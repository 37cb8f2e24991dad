// Whole-program requests (docs/cuda_program.md): a ComputeEval problem and solution in a kernel's
// metadata, every path checked before anything is written, each refusal naming its field.
#include "request/parse.hpp"
#include "request/program.hpp"

#include <gmock/gmock.h>

#include <boost/json/parse.hpp>

namespace keval::request {
namespace {

namespace json = boost::json;
using ::testing::HasSubstr;

json::object file(const std::string& path, const std::string& content = "int x;\n") {
  return json::object{{"path", path}, {"content", content}};
}

json::object problem() {
  return json::object{
      {"type", "cuda_cpp"},
      {"task_id", "KEVAL/t"},
      {"context_files", json::array{file("include/k.h")}},
      {"test_files", json::array{file("test/main.cu")}},
      {"build_command", "nvcc -I include -o test.out solution.cu test/*.cu"},
      {"test_command", "./test.out"},
      {"timeout_seconds", 30},
  };
}

json::object request_with(json::object problem_json, json::value solution_files) {
  json::object solution{{"type", "file"}, {"task_id", "KEVAL/t"}, {"files", solution_files}};
  json::object metadata{{"problem", std::move(problem_json)}, {"solution", std::move(solution)}};
  return json::object{{"kernel", json::object{{"kernel_type", "cuda_program"},
                                              {"source_code", ""},
                                              {"metadata", std::move(metadata)}}}};
}

ProgramRequest parse(const json::object& request) {
  const EvalRequest r = parse_request(json::value(request), EvalRequest::Mode::evaluate);
  return parse_program(r.kernel, "kernel");
}

// The error of parsing `request`, as "path: message".
std::string error_of(const json::object& request) {
  try {
    parse(request);
  } catch (const RequestError& e) {
    return e.path() + ": " + e.message();
  }
  return "(accepted)";
}

TEST(ProgramRequest, AComputeEvalProblemAndSolutionMapUnchanged) {
  json::object p = problem();
  p["source_references"] = json::object{{"all", json::array{"cudaMalloc"}},
                                        {"any", json::array{"cudaMemcpy", "cudaMemcpyAsync"}}};
  p["timing_mode"] = json::object{
      {"type", "region"}, {"include", json::array{"bench*"}}, {"time_type", "wall_clock"}};
  p["benchmark_command"] = "./test.out --perf";
  p["compute_capability"] = "9.0";
  p["min_cuda_toolkit"] = "12.4";
  p["prompt"] = "unused by keval";
  p["baseline_solution"] = json::object{
      {"type", "file"}, {"task_id", "KEVAL/t"}, {"files", json::array{file("solution.cu")}}};
  const ProgramRequest r = parse(request_with(p, json::array{file("solution.cu")}));
  EXPECT_EQ(r.task_id, "KEVAL/t");
  ASSERT_EQ(r.context_files.size(), 1u);
  EXPECT_EQ(r.test_files[0].path, "test/main.cu");
  EXPECT_EQ(*r.build_command, "nvcc -I include -o test.out solution.cu test/*.cu");
  EXPECT_EQ(r.references_all, std::vector<std::string>{"cudaMalloc"});
  EXPECT_EQ(r.references_any.size(), 2u);
  EXPECT_EQ(r.timing_mode.type, "region");
  EXPECT_EQ(r.timing_mode.time_type, "wall_clock");
  EXPECT_EQ(*r.compute_capability, "9.0");
  EXPECT_EQ(*r.timeout_seconds, 30.0);
  ASSERT_TRUE(r.baseline.has_value());
  EXPECT_EQ(r.solution.files[0].path, "solution.cu");
}

TEST(ProgramRequest, ReferencesAsAStringOrAListAreAll) {
  json::object p = problem();
  p["source_references"] = "cublasSgemm";
  EXPECT_EQ(parse(request_with(p, json::array{file("solution.cu")})).references_all,
            std::vector<std::string>{"cublasSgemm"});
  p["source_references"] = json::array{"a", "b"};
  EXPECT_EQ(parse(request_with(p, json::array{file("solution.cu")})).references_all.size(), 2u);
  p["source_references"] = json::object{};
  EXPECT_THAT(error_of(request_with(p, json::array{file("solution.cu")})),
              HasSubstr("kernel.metadata.problem.source_references: must specify at least one"));
}

TEST(ProgramRequest, ComputeCapabilityDefaultsAndNullMeansNoGpu) {
  EXPECT_EQ(*parse(request_with(problem(), json::array{file("s.cu")})).compute_capability, "8.0");
  json::object p = problem();
  p["compute_capability"] = nullptr;
  EXPECT_FALSE(parse(request_with(p, json::array{file("s.cu")})).compute_capability.has_value());
}

TEST(ProgramRequest, SourceCodeStandsForSolutionCu) {
  json::object r = request_with(problem(), json::array{});
  r["kernel"].as_object()["metadata"].as_object().erase("solution");
  r["kernel"].as_object()["source_code"] = "__global__ void k() {}\n";
  const ProgramRequest p = parse(r);
  ASSERT_EQ(p.solution.files.size(), 1u);
  EXPECT_EQ(p.solution.files[0].path, "solution.cu");
  r["kernel"].as_object()["source_code"] = "";
  EXPECT_THAT(error_of(r), HasSubstr("kernel.metadata.solution: is required"));
}

TEST(ProgramRequest, PathsThatLeaveTheWorkspaceAreRefusedNamingTheField) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"/etc/passwd", "must be relative"},
      {"../outside.cu", "must not contain '..'"},
      {"a/../../outside.cu", "must not contain '..'"},
      {"src/..", "must not contain '..'"},
      {"a//b.cu", "has an empty component"},
      {"./a.cu", "must not contain '.' components"},
      {"dir/", "must name a file"},
      {".keval/harness/0.o", "must not be below .keval/"},
      {"a\\..\\b", "must use '/'"},
      {std::string("a\nb"), "must not contain control characters"},
      {"", "must not be empty"},
      {std::string(5000, 'a'), "is longer than 4096"},
  };
  for (const auto& [path, why] : cases) {
    const std::string error = error_of(request_with(problem(), json::array{file(path)}));
    EXPECT_THAT(error, HasSubstr("kernel.metadata.solution.files[0].path: " + why)) << path;
  }
  json::object p = problem();
  p["context_files"] = json::array{file("ok.h"), file("../../etc/cron.d/x")};
  EXPECT_THAT(error_of(request_with(p, json::array{file("s.cu")})),
              HasSubstr("kernel.metadata.problem.context_files[1].path: must not contain '..'"));
}

TEST(ProgramRequest, ASolutionNeverReplacesTheHarness) {
  EXPECT_THAT(error_of(request_with(problem(), json::array{file("s.cu"), file("test/main.cu")})),
              HasSubstr("kernel.metadata.solution.files[1].path: \"test/main.cu\" is one of the "
                        "problem's test files"));
  // A context file may be replaced, as ComputeEval allows.
  EXPECT_NO_THROW(parse(request_with(problem(), json::array{file("include/k.h")})));
}

TEST(ProgramRequest, AFileCannotAlsoBeADirectory) {
  EXPECT_THAT(error_of(request_with(problem(), json::array{file("include/k.h/x.cu")})),
              HasSubstr("needs \"include/k.h\" to be a directory"));
}

TEST(ProgramRequest, DuplicatesSizesAndShapes) {
  EXPECT_THAT(error_of(request_with(problem(), json::array{file("a.cu"), file("a.cu")})),
              HasSubstr("files[1].path: names \"a.cu\" a second time"));
  ProgramLimits small;
  small.max_file_bytes = 10;
  json::object r = request_with(problem(), json::array{file("a.cu", std::string(11, 'x'))});
  const EvalRequest e = parse_request(json::value(r), EvalRequest::Mode::evaluate);
  EXPECT_THROW(
      {
        try {
          parse_program(e.kernel, "kernel", small);
        } catch (const RequestError& err) {
          EXPECT_EQ(err.path(), "kernel.metadata.solution.files[0].content");
          throw;
        }
      },
      RequestError);
  json::object p = problem();
  p.erase("test_command");
  EXPECT_THAT(error_of(request_with(p, json::array{file("s.cu")})),
              HasSubstr("kernel.metadata.problem.test_command: is required"));
  p = problem();
  p["timing_mode"] = json::object{{"type", "fastest"}};
  EXPECT_THAT(error_of(request_with(p, json::array{file("s.cu")})),
              HasSubstr("timing_mode.type: must be one of process, kernels, region, gpu, custom"));
  p = problem();
  p["timeout_seconds"] = -1;
  EXPECT_THAT(error_of(request_with(p, json::array{file("s.cu")})),
              HasSubstr("timeout_seconds: must be > 0"));
  json::object r2 = request_with(problem(), json::array{file("s.cu")});
  r2["kernel"].as_object()["metadata"].as_object()["solution"] =
      json::object{{"type", "patch"}, {"patch", "diff"}};
  EXPECT_THAT(error_of(r2), HasSubstr("patch solutions are not supported"));
  json::object r3 = request_with(problem(), json::array{file("s.cu")});
  r3["kernel"].as_object()["metadata"].as_object()["benchmark"] = true;
  EXPECT_THAT(error_of(r3), HasSubstr("kernel.metadata.benchmark: is true but the problem has no "
                                      "benchmark_command"));
  json::object r4 = request_with(problem(), json::array{file("s.cu")});
  r4["kernel"].as_object()["metadata"].as_object()["solution"].as_object()["task_id"] = "OTHER";
  EXPECT_THAT(error_of(r4), HasSubstr("solution.task_id: is \"OTHER\" but the problem is"));
}

TEST(ProgramRequest, PathProblemIsEmptyForOrdinaryPaths) {
  for (const char* ok :
       {"solution.cu", "include/kernel.h", "test/a/b/c.cu", ".clang-format", "a..b", "..a"})
    EXPECT_EQ(path_problem(ok), "") << ok;
}

} // namespace
} // namespace keval::request
