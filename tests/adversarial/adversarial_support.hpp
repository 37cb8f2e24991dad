// What the adversarial cases share: the hostile candidates' sources (candidates/, with
// "@NAME@" placeholders filled in by the test), compare requests against an honest torch
// reference, the CLI and the daemon as a client meets them, and checks on what a job left
// behind (processes, records, lines the candidate printed).
//
// Every case asserts the SECURE outcome: the candidate failed (or, for slowing the reference, the
// reference's time is unaffected), the verdict and the record are the genuine ones, nothing of
// the job is left running, and the daemon still serves.
#pragma once

#include "core/daemon/daemon_harness.hpp"
#include "support/test_env.hpp"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>
#include <sys/types.h>

namespace keval::test::adversarial {

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace std::chrono_literals;
using Substitutions = std::vector<std::pair<std::string, std::string>>;

// ---- sources ------------------------------------------------------------------------------------

inline fs::path candidates_dir() {
  return KEVAL_ADVERSARIAL_CANDIDATES;
}

// The text of candidates/<file> with every "@NAME@" of `substitutions` replaced. Throws when the
// file is missing or a placeholder is left unfilled (a case that forgot one would test nothing).
inline std::string source(const std::string& file, const Substitutions& substitutions = {}) {
  std::ifstream in(candidates_dir() / file);
  if (!in)
    throw std::runtime_error("cannot read candidate " + (candidates_dir() / file).string());
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  for (const auto& [name, value] : substitutions) {
    const std::string placeholder = "@" + name + "@";
    for (size_t at = text.find(placeholder); at != std::string::npos;
         at = text.find(placeholder, at + value.size()))
      text.replace(at, placeholder.size(), value);
  }
  std::smatch left;
  if (std::regex_search(text, left, std::regex("@[A-Z_]+@")))
    throw std::runtime_error("candidate " + file + " has an unfilled placeholder " + left.str());
  return text;
}

// A job id no other job of this run has: `prefix` and random hex.
inline std::string unique_id(const std::string& prefix) {
  std::random_device rd;
  std::ostringstream id;
  id << prefix << '-' << std::hex << rd() << rd();
  return id.str();
}

// ---- requests -----------------------------------------------------------------------------------

inline json::object kernel(const std::string& type, const std::string& source_code,
                           const json::value& io = nullptr, json::object metadata = {}) {
  json::object k;
  k["source_code"] = source_code;
  k["kernel_type"] = type;
  if (!metadata.empty())
    k["metadata"] = std::move(metadata);
  if (!io.is_null())
    k["io"] = io;
  return k;
}

// The io of reference_vector_add.cu (out = x + y) over `n` floats: fresh randn inputs.
inline json::value vector_add_io_of(int64_t n) {
  const auto tensor = [n](const char* name, const char* role) {
    json::object spec{{"shape", json::array{n}}, {"dtype", "float32"}};
    if (std::string(role) == "input")
      spec["init"] = json::object{{"kind", "randn"}};
    return json::object{{"name", name}, {"type", "tensor"}, {"role", role}, {"tensor_spec", spec}};
  };
  return json::object{
      {"args", json::array{tensor("x", "input"), tensor("y", "input"), tensor("out", "output"),
                           json::object{{"name", "n"}, {"type", "int"}, {"value", n}}}},
      {"launch", json::object{{"grid", json::object{{"x", (n + 255) / 256}}},
                              {"block", json::object{{"x", 256}}}}}};
}

// A compare request with a job id; few trials: these cases are about verdicts, not timings.
inline json::object compare_request(json::object ref, json::object custom,
                                    const std::string& job_id, int64_t num_trials = 5,
                                    double timeout_s = 120) {
  return json::object{{"ref_kernel", std::move(ref)},
                      {"custom_kernel", std::move(custom)},
                      {"num_trials", num_trials},
                      {"timeout", timeout_s},
                      {"job_id", job_id}};
}

// The honest torch ReLU reference (reference_relu.py) against a torch-type candidate.
inline json::object relu_compare(const std::string& candidate_source, const std::string& job_id,
                                 const std::string& custom_type = "torch") {
  return compare_request(kernel("torch", source("reference_relu.py")),
                         kernel(custom_type, candidate_source), job_id);
}

// ---- results ------------------------------------------------------------------------------------

// keval's output as a JSON value, or null when it is not JSON. Lenient about UTF-8: a kernel's
// stdout, kept in the result, may hold any bytes; these cases check verdicts, not encodings.
inline json::value parse_lenient(std::string_view text) {
  json::parse_options options;
  options.allow_invalid_utf8 = true;
  json::error_code ec;
  auto value = json::parse(text, ec, {}, options);
  return ec ? json::value(nullptr) : value;
}

// The body of a daemon's answer as a JSON object; throws when it is not one.
inline json::object body_of(const daemon::HttpResult& r) {
  auto value = parse_lenient(r.body());
  if (!value.is_object())
    throw std::runtime_error("the answer (HTTP " + std::to_string(r.status) +
                             ") is not a JSON object: " + r.body().substr(0, 2000));
  return value.as_object();
}

inline const json::object& exec_result(const json::object& body) {
  static const json::object none;
  const auto* e = body.if_contains("kernel_exec_result");
  return e != nullptr && e->is_object() ? e->as_object() : none;
}

inline bool correctness(const json::object& body) {
  const auto* c = exec_result(body).if_contains("correctness");
  return c != nullptr && c->is_bool() && c->as_bool();
}

inline std::optional<double> number_at(const json::object& o, const char* key) {
  const auto* v = o.if_contains(key);
  if (v == nullptr || !v->is_number())
    return std::nullopt;
  return v->to_number<double>();
}

// A string value's text; "" for anything else.
inline std::string text(const json::value& v) {
  return v.is_string() ? std::string(v.as_string()) : std::string();
}

// The speedup reported, if any.
// kernel_exec_result.metadata.flags ({name, reason, details, strict}), or none.
inline const json::array& flags_of(const json::object& body) {
  static const json::array none;
  const auto* metadata = exec_result(body).if_contains("metadata");
  const auto* flags = metadata != nullptr && metadata->is_object()
                          ? metadata->as_object().if_contains("flags")
                          : nullptr;
  return flags != nullptr && flags->is_array() ? flags->as_array() : none;
}

inline const json::object* flag_named(const json::object& body, const std::string& name) {
  for (const auto& f : flags_of(body))
    if (f.is_object() && f.as_object().if_contains("name") &&
        text(f.as_object().at("name")) == name)
      return &f.as_object();
  return nullptr;
}

inline std::string validation_error(const json::object& body) {
  const auto* e = body.if_contains("validation_error");
  return e != nullptr && e->is_string() ? std::string(e->as_string()) : std::string();
}

inline std::optional<double> speedup(const json::object& body) {
  return number_at(body, "speedup");
}

// A JSON value for a failure message, cut to `limit` characters.
inline std::string shown(const json::value& v, size_t limit = 6000) {
  std::string text = json::serialize(v);
  if (text.size() > limit)
    text = text.substr(0, limit) + "...[" + std::to_string(text.size() - limit) + " more]";
  return text;
}

// Whether an object anywhere in `v` has the key `key`. The candidates mark what they forge with
// a "forged" key (a key, not a word: the request's source code, kept in records, has the word).
inline bool has_key(const json::value& v, const std::string& key) {
  if (v.is_object()) {
    for (const auto& [name, value] : v.as_object())
      if (name == key || has_key(value, key))
        return true;
  }
  if (v.is_array())
    for (const auto& value : v.as_array())
      if (has_key(value, key))
        return true;
  return false;
}

// Lines starting with `marker` in any string of `v` (the candidate's stdout is kept in the
// result: kernel_exec_result.metadata.worker.stdout today; searched everywhere so that a result
// that keeps it elsewhere still works); each without the marker.
inline void marker_lines(const json::value& v, const std::string& marker,
                         std::vector<std::string>& lines) {
  if (v.is_string()) {
    std::istringstream text{std::string(v.as_string())};
    for (std::string line; std::getline(text, line);)
      if (line.rfind(marker, 0) == 0)
        lines.push_back(line.substr(marker.size()));
  } else if (v.is_object()) {
    for (const auto& [key, value] : v.as_object())
      marker_lines(value, marker, lines);
  } else if (v.is_array()) {
    for (const auto& value : v.as_array())
      marker_lines(value, marker, lines);
  }
}

inline std::vector<std::string> marker_lines(const json::value& v, const std::string& marker) {
  std::vector<std::string> lines;
  marker_lines(v, marker, lines);
  return lines;
}

// The body of a job result that says it failed genuinely: no correctness, no forged speedup.
inline void expect_genuine_failure(const json::object& body) {
  EXPECT_FALSE(correctness(body)) << shown(body);
  EXPECT_FALSE(has_key(body, "forged")) << shown(body);
  const auto s = speedup(body);
  EXPECT_TRUE(!s || *s < 1000) << "speedup " << *s << ": " << shown(body);
}

// ---- the CLI ------------------------------------------------------------------------------------

struct CliRun {
  int exit_code = -1;            // -1: killed or timed out
  json::object body;             // the result: the JSON object that ends stdout
  bool stdout_is_result = false; // stdout held that object and nothing else
  std::string out, err;
};

// The JSON object that ends `text` (the CLI prints its result last), or nullopt.
inline std::optional<json::object> trailing_object(const std::string& text) {
  const auto end = text.find_last_not_of(" \t\r\n");
  if (end == std::string::npos || text[end] != '}')
    return std::nullopt;
  for (auto at = text.rfind('{', end); at != std::string::npos;
       at = at == 0 ? std::string::npos : text.rfind('{', at - 1)) {
    auto parsed = parse_lenient(std::string_view(text).substr(at, end + 1 - at));
    if (parsed.is_object())
      return parsed.as_object();
  }
  return std::nullopt;
}

// `keval compare` on `request`, with its state (records kept) in `state_dir`.
// `keval MODE REQUEST --state-dir DIR --keep-record [extra]`, MODE "compare" or "evaluate".
inline CliRun run_cli_mode(const std::string& mode, const json::object& request,
                           const fs::path& state_dir,
                           const std::vector<std::string>& extra_args = {}) {
  fs::create_directories(state_dir);
  const auto path = write_request(state_dir.parent_path(),
                                  state_dir.filename().string() + "-request.json", request);
  std::vector<std::string> args{mode, path.string(), "--state-dir", state_dir.string(),
                                "--keep-record"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  auto r = run_keval(args);
  CliRun run;
  run.exit_code = r.exit_code ? *r.exit_code : -1;
  run.out = r.out;
  run.err = r.err;
  auto parsed = parse_lenient(r.out);
  if (parsed.is_object()) {
    run.body = parsed.as_object();
    run.stdout_is_result = true;
  } else if (auto last = trailing_object(r.out)) {
    run.body = std::move(*last); // something else wrote into the CLI's stdout before it
  }
  return run;
}

inline CliRun run_cli(const json::object& request, const fs::path& state_dir,
                      const std::vector<std::string>& extra_args = {}) {
  return run_cli_mode("compare", request, state_dir, extra_args);
}

inline std::string describe(const CliRun& run) {
  return "exit code " + std::to_string(run.exit_code) +
         "\nstdout: " + (run.stdout_is_result ? shown(run.body) : shown(json::string(run.out))) +
         "\nstderr (tail): " +
         (run.err.size() > 3000 ? run.err.substr(run.err.size() - 3000) : run.err);
}

// A CLI run whose kernel failed, genuinely: exit code 1, the result (and nothing the kernel
// wrote) on stdout, no correctness, no forged speedup.
inline void expect_cli_kernel_failure(const CliRun& run, const std::string& why) {
  EXPECT_TRUE(run.stdout_is_result)
      << "the CLI's stdout is not exactly its result (the kernel wrote into it?): "
      << shown(json::string(run.out), 3000);
  EXPECT_EQ(run.exit_code, 1) << why << "; " << describe(run);
  expect_genuine_failure(run.body);
}

// ---- the daemon ---------------------------------------------------------------------------------

// A `keval serve` of the test's own (state directory and socket in a temporary directory).
class Daemon {
public:
  explicit Daemon(std::vector<std::string> extra_args = {"--max-workers", "6"}) {
    process_ = std::make_unique<daemon::DaemonProcess>(dirs_.state(), dirs_.socket(),
                                                       std::move(extra_args));
  }
  bool ready() { return process_->wait_ready(); }
  const fs::path& socket() const { return process_->socket(); }
  fs::path state() const { return dirs_.state(); }
  const fs::path& tmp() const { return dirs_.tmp.path(); }
  daemon::DaemonProcess& process() { return *process_; }
  std::string log() const { return process_->log(); }

  // POST with a fresh connection; throws when the daemon does not answer with HTTP.
  daemon::HttpResult post(const std::string& target, const json::object& body) {
    return daemon::HttpClient(socket()).post(target, body);
  }

  // True when GET /health answers as the daemon does: 200, status ok, its version.
  bool serves_health(std::string* answer = nullptr) {
    try {
      const auto r = daemon::HttpClient(socket(), 30s).get("/health");
      if (answer != nullptr)
        *answer = std::to_string(r.status) + " " + r.body();
      if (r.status != 200)
        return false;
      const auto body = body_of(r);
      return body.contains("version") && body.at("status") == "ok";
    } catch (const std::exception& e) {
      if (answer != nullptr)
        *answer = e.what();
      return false;
    }
  }

  // GET /jobs/{id}; nullopt when the answer is not this job's view (a forged answer).
  std::optional<json::object> job_view(const std::string& id) {
    const auto r = daemon::HttpClient(socket(), 30s).get("/jobs/" + id);
    auto parsed = parse_lenient(r.body());
    if (!parsed.is_object())
      return std::nullopt;
    auto view = parsed.as_object();
    const auto* job_id = view.if_contains("job_id");
    if (job_id == nullptr || !job_id->is_string() || job_id->as_string() != id)
      return std::nullopt;
    return view;
  }

  // Polls GET /jobs/{id} until the job has finished; its view. Fails the test on a view that is
  // not this job's.
  json::object wait_finished(const std::string& id, std::chrono::milliseconds limit = 180s) {
    json::object view;
    std::string forged;
    const bool finished = daemon::eventually(
        [&] {
          auto v = job_view(id);
          if (!v) {
            forged = "GET /jobs/" + id + " was answered with another job's or a forged view";
            return true;
          }
          view = std::move(*v);
          const auto& status = view.at("status").as_string();
          return status == "completed" || status == "failed";
        },
        limit);
    if (!forged.empty())
      throw std::runtime_error(forged);
    if (!finished)
      throw std::runtime_error("job " + id + " did not finish: " + shown(view));
    return view;
  }

private:
  daemon::DaemonDirs dirs_;
  std::unique_ptr<daemon::DaemonProcess> process_;
};

// ---- processes ----------------------------------------------------------------------------------

// Whether `pid` is a process that still runs (a zombie waiting for its reaper does not).
inline bool process_alive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!in || !std::getline(in, stat))
    return false;
  const auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size())
    return false;
  const char state = stat[close + 2];
  return state != 'Z' && state != 'X';
}

// The pids of `pids` still running after at most `limit`: checked at once, then polled briefly
// (a kill the worker sent before reporting may take a moment to be delivered).
inline std::vector<pid_t> still_alive(const std::vector<pid_t>& pids,
                                      std::chrono::milliseconds limit = 300ms) {
  std::vector<pid_t> alive;
  daemon::eventually(
      [&] {
        alive.clear();
        for (pid_t pid : pids)
          if (process_alive(pid))
            alive.push_back(pid);
        return alive.empty();
      },
      limit);
  return alive;
}

// The pids a candidate recorded: "<role>.pid" files in `dir` and "KEVAL_PID <pid> <role>" lines
// it printed (either may be unavailable to a sandboxed process; both are read).
// Where a candidate leaves what the test observes (pid files, markers): its sandbox lets it write
// nowhere but its own directory and /dev/shm, so a fresh world-writable directory there (the job
// uid, when keval runs as root, is not ours). Removed with everything in it.
class DropBox {
public:
  DropBox() {
    const fs::path base =
        fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    path_ = base / unique_id("keval-adversarial");
    fs::create_directories(path_);
    fs::permissions(path_, fs::perms::all, fs::perm_options::replace);
  }
  ~DropBox() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  DropBox(const DropBox&) = delete;
  DropBox& operator=(const DropBox&) = delete;
  const fs::path& path() const { return path_; }

private:
  fs::path path_;
};

inline std::vector<pid_t> recorded_pids(const fs::path& dir, const json::value& result) {
  std::vector<pid_t> pids;
  auto add = [&](const std::string& text) {
    try {
      const pid_t pid = static_cast<pid_t>(std::stol(text));
      if (pid > 1 && std::find(pids.begin(), pids.end(), pid) == pids.end())
        pids.push_back(pid);
    } catch (const std::exception&) {
    }
  };
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".pid")
      continue;
    std::ifstream in(entry.path());
    std::string text;
    std::getline(in, text);
    add(text);
  }
  for (const auto& line : marker_lines(result, "KEVAL_PID "))
    add(line);
  return pids;
}

// Test cleanup only: ends whatever of `pids` is still running (they are the candidate's own
// processes, which this test caused), so a failing case does not leave them behind.
inline void kill_leftovers(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids)
    if (process_alive(pid))
      ::kill(pid, SIGKILL);
}

// ---- environment --------------------------------------------------------------------------------

// Why the torch-based cases cannot run here ("" when they can); computed once.
inline const std::string& torch_problem() {
  static const std::string problem = []() -> std::string {
    if (built_registry().find("torch") == nullptr)
      return "the torch plugin was not built";
    const char* chosen = std::getenv("KEVAL_PYTHON");
    const std::string python =
        chosen != nullptr && chosen[0] != '\0' ? chosen : KEVAL_TEST_PYTHON_EXECUTABLE;
    if (python.empty())
      return "keval was built without Python";
    const auto r = supervisor::run_command(python, {"-c", "import torch"}, 120s);
    if (r.exit_code && *r.exit_code == 0)
      return {};
    return python + " cannot import torch: " + r.err;
  }();
  return problem;
}

// Base fixture of the torch cases: skips, with the reason, where torch cannot run.
class TorchAttack : public ::testing::Test {
protected:
  void SetUp() override {
    if (!torch_problem().empty())
      GTEST_SKIP() << torch_problem();
  }
};

} // namespace keval::test::adversarial
