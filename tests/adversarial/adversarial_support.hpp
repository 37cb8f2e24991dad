// What the adversarial cases share: the hostile candidates' sources (candidates/, with
// "@NAME@" placeholders filled in by the test), compare requests against an honest torch
// reference, the CLI and the daemon as a client meets them, and checks on what a job left
// behind (processes, records, lines the candidate printed).
//
// Every case asserts the SECURE outcome: the candidate failed (or, for slowing the reference, the
// reference's time is unaffected), the verdict and the record are the genuine ones, nothing of
// the job is left running, and the daemon still serves.
#pragma once

#include "support/daemon_harness.hpp"
#include "support/test_env.hpp"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
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
std::string source(const std::string& file, const Substitutions& substitutions = {});

// A job id no other job of this run has: `prefix` and random hex.
std::string unique_id(const std::string& prefix);

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
json::value parse_lenient(std::string_view text);

// The body of a daemon's answer as a JSON object; throws when it is not one.
json::object body_of(const daemon::HttpResult& r);

const json::object& exec_result(const json::object& body);

// A copy of the value at a JSON Pointer into a result's body
// ("/kernel_exec_result/metadata/worker/stderr"); null where there is none.
json::value value_at(const json::object& body, std::string_view pointer);

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
const json::array& flags_of(const json::object& body);

const json::object* flag_named(const json::object& body, const std::string& name);

inline std::string validation_error(const json::object& body) {
  const auto* e = body.if_contains("validation_error");
  return e != nullptr && e->is_string() ? std::string(e->as_string()) : std::string();
}

inline std::optional<double> speedup(const json::object& body) {
  return number_at(body, "speedup");
}

// A JSON value for a failure message, cut to `limit` characters.
std::string shown(const json::value& v, size_t limit = 6000);

// Whether an object anywhere in `v` has the key `key`. The candidates mark what they forge with
// a "forged" key (a key, not a word: the request's source code, kept in records, has the word).
bool has_key(const json::value& v, const std::string& key);

// Lines starting with `marker` in any string of `v` (the candidate's stdout is kept in the
// result: kernel_exec_result.metadata.worker.stdout today; searched everywhere so that a result
// that keeps it elsewhere still works); each without the marker.
void marker_lines(const json::value& v, const std::string& marker, std::vector<std::string>& lines);

std::vector<std::string> marker_lines(const json::value& v, const std::string& marker);

// The body of a job result that says it failed genuinely: no correctness, no forged speedup.
void expect_genuine_failure(const json::object& body);

// ---- the CLI ------------------------------------------------------------------------------------

struct CliRun {
  int exit_code = -1;            // -1: killed or timed out
  json::object body;             // the result: the JSON object that ends stdout
  bool stdout_is_result = false; // stdout held that object and nothing else
  std::string out, err;
};

// The JSON object that ends `text` (the CLI prints its result last), or nullopt.
std::optional<json::object> trailing_object(const std::string& text);

// `keval compare` on `request`, with its state (records kept) in `state_dir`.
// `keval MODE REQUEST --state-dir DIR --keep-record [extra]`, MODE "compare" or "evaluate".
CliRun run_cli_mode(const std::string& mode, const json::object& request, const fs::path& state_dir,
                    const std::vector<std::string>& extra_args = {});

inline CliRun run_cli(const json::object& request, const fs::path& state_dir,
                      const std::vector<std::string>& extra_args = {}) {
  return run_cli_mode("compare", request, state_dir, extra_args);
}

std::string describe(const CliRun& run);

// A CLI run whose kernel failed, genuinely: exit code 1, the result (and nothing the kernel
// wrote) on stdout, no correctness, no forged speedup.
void expect_cli_kernel_failure(const CliRun& run, const std::string& why);

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
  bool serves_health(std::string* answer = nullptr);
  // GET /jobs/{id}; nullopt when the answer is not this job's view (a forged answer).
  std::optional<json::object> job_view(const std::string& id);
  // Polls GET /jobs/{id} until the job has finished; its view. Fails the test on a view that is
  // not this job's.
  json::object wait_finished(const std::string& id, std::chrono::milliseconds limit = 180s);

private:
  daemon::DaemonDirs dirs_;
  std::unique_ptr<daemon::DaemonProcess> process_;
};

// ---- processes ----------------------------------------------------------------------------------

// Whether `pid` is a process that still runs (a zombie waiting for its reaper does not).
bool process_alive(pid_t pid);

// The pids of `pids` still running after at most `limit`: checked at once, then polled briefly
// (a kill the worker sent before reporting may take a moment to be delivered).
std::vector<pid_t> still_alive(const std::vector<pid_t>& pids,
                               std::chrono::milliseconds limit = 300ms);

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

std::vector<pid_t> recorded_pids(const fs::path& dir, const json::value& result);

// Test cleanup only: ends whatever of `pids` is still running (they are the candidate's own
// processes, which this test caused), so a failing case does not leave them behind.
void kill_leftovers(const std::vector<pid_t>& pids);

// ---- environment --------------------------------------------------------------------------------

// Why the torch-based cases cannot run here ("" when they can); computed once.
const std::string& torch_problem();

// Base fixture of the torch cases: skips, with the reason, where torch cannot run.
class TorchAttack : public ::testing::Test {
protected:
  void SetUp() override {
    if (!torch_problem().empty())
      GTEST_SKIP() << torch_problem();
  }
};

} // namespace keval::test::adversarial
