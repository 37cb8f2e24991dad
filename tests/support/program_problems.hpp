// Our own ComputeEval-format problems (tests/compute_eval/problems/<name>: problem.json, context/,
// test/, solution/, variants/<variant>/) as `cuda_program` requests. Header-only; a suite that
// includes it defines KEVAL_TEST_PROBLEMS_DIR (the problems folder).
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>

namespace keval::test {

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The files below `dir`, paths relative to it with `prefix`, sorted.
inline boost::json::array files_of(const std::filesystem::path& dir,
                                   const std::string& prefix = "") {
  namespace fs = std::filesystem;
  std::map<std::string, std::string> files;
  if (fs::exists(dir))
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.is_regular_file())
        files[prefix + fs::relative(e.path(), dir).generic_string()] = read_text(e.path());
  boost::json::array out;
  for (const auto& [path, content] : files)
    out.push_back(boost::json::object{{"path", path}, {"content", content}});
  return out;
}

// A problem directory in the datapack format (python/README.md) as a problems.jsonl line.
inline boost::json::object load_problem(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(KEVAL_TEST_PROBLEMS_DIR) / name;
  boost::json::object p = boost::json::parse(read_text(dir / "problem.json")).as_object();
  p["context_files"] = files_of(dir / "context");
  p["test_files"] = files_of(dir / "test", "test/");
  p["baseline_solution"] = boost::json::object{
      {"type", "file"}, {"task_id", p.at("task_id")}, {"files", files_of(dir / "solution")}};
  return p;
}

// An /evaluate request for `problem` with the solution of variants/<variant>; `extra` joins the
// kernel's metadata (benchmark, harness_reuse, ...).
inline boost::json::object program_request(const boost::json::object& problem,
                                           const std::string& variant,
                                           boost::json::object extra = {}) {
  const std::filesystem::path dir = std::filesystem::path(KEVAL_TEST_PROBLEMS_DIR) /
                                    std::string(problem.at("task_id").as_string()).substr(6) /
                                    "variants" / variant;
  boost::json::object metadata{{"problem", problem},
                               {"solution", boost::json::object{{"type", "file"},
                                                                {"task_id", problem.at("task_id")},
                                                                {"files", files_of(dir)}}}};
  for (auto& [k, v] : extra)
    metadata[k] = v;
  return boost::json::object{{"kernel", boost::json::object{{"kernel_type", "cuda_program"},
                                                            {"source_code", ""},
                                                            {"metadata", std::move(metadata)}}},
                             {"timeout", 300}};
}

} // namespace keval::test
