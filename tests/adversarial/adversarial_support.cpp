// The bodies of adversarial_support.hpp's helpers, compiled once for both suites.
#include "adversarial_support.hpp"

#include <algorithm>
#include <random>
#include <regex>

namespace keval::test::adversarial {

std::string source(const std::string& file, const Substitutions& substitutions) {
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

std::string unique_id(const std::string& prefix) {
  std::random_device rd;
  std::ostringstream id;
  id << prefix << '-' << std::hex << rd() << rd();
  return id.str();
}

json::value parse_lenient(std::string_view text) {
  json::parse_options options;
  options.allow_invalid_utf8 = true;
  json::error_code ec;
  auto value = json::parse(text, ec, {}, options);
  return ec ? json::value(nullptr) : value;
}

json::object body_of(const daemon::HttpResult& r) {
  auto value = parse_lenient(r.body());
  if (!value.is_object())
    throw std::runtime_error("the answer (HTTP " + std::to_string(r.status) +
                             ") is not a JSON object: " + r.body().substr(0, 2000));
  return value.as_object();
}

const json::object& exec_result(const json::object& body) {
  static const json::object none;
  const auto* e = body.if_contains("kernel_exec_result");
  return e != nullptr && e->is_object() ? e->as_object() : none;
}

json::value value_at(const json::object& body, std::string_view pointer) {
  const json::value whole(body);
  boost::system::error_code ec;
  const json::value* found = whole.find_pointer(pointer, ec);
  return found != nullptr ? *found : json::value();
}

const json::array& flags_of(const json::object& body) {
  static const json::array none;
  const auto* metadata = exec_result(body).if_contains("metadata");
  const auto* flags = metadata != nullptr && metadata->is_object()
                          ? metadata->as_object().if_contains("flags")
                          : nullptr;
  return flags != nullptr && flags->is_array() ? flags->as_array() : none;
}

const json::object* flag_named(const json::object& body, const std::string& name) {
  for (const auto& f : flags_of(body))
    if (f.is_object() && f.as_object().if_contains("name") &&
        text(f.as_object().at("name")) == name)
      return &f.as_object();
  return nullptr;
}

std::string shown(const json::value& v, size_t limit) {
  std::string text = json::serialize(v);
  if (text.size() > limit)
    text = text.substr(0, limit) + "...[" + std::to_string(text.size() - limit) + " more]";
  return text;
}

bool has_key(const json::value& v, const std::string& key) {
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

void marker_lines(const json::value& v, const std::string& marker,
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

std::vector<std::string> marker_lines(const json::value& v, const std::string& marker) {
  std::vector<std::string> lines;
  marker_lines(v, marker, lines);
  return lines;
}

void expect_genuine_failure(const json::object& body) {
  EXPECT_FALSE(correctness(body)) << shown(body);
  EXPECT_FALSE(has_key(body, "forged")) << shown(body);
  const auto s = speedup(body);
  EXPECT_TRUE(!s || *s < 1000) << "speedup " << *s << ": " << shown(body);
}

std::optional<json::object> trailing_object(const std::string& text) {
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

CliRun run_cli_mode(const std::string& mode, const json::object& request, const fs::path& state_dir,
                    const std::vector<std::string>& extra_args) {
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

std::string describe(const CliRun& run) {
  return "exit code " + std::to_string(run.exit_code) +
         "\nstdout: " + (run.stdout_is_result ? shown(run.body) : shown(json::string(run.out))) +
         "\nstderr (tail): " +
         (run.err.size() > 3000 ? run.err.substr(run.err.size() - 3000) : run.err);
}

void expect_cli_kernel_failure(const CliRun& run, const std::string& why) {
  EXPECT_TRUE(run.stdout_is_result)
      << "the CLI's stdout is not exactly its result (the kernel wrote into it?): "
      << shown(json::string(run.out), 3000);
  EXPECT_EQ(run.exit_code, 1) << why << "; " << describe(run);
  expect_genuine_failure(run.body);
}

bool process_alive(pid_t pid) {
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

std::vector<pid_t> still_alive(const std::vector<pid_t>& pids, std::chrono::milliseconds limit) {
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

std::vector<pid_t> recorded_pids(const fs::path& dir, const json::value& result) {
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

void kill_leftovers(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids)
    if (process_alive(pid))
      ::kill(pid, SIGKILL);
}

const std::string& torch_problem() {
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

bool Daemon::serves_health(std::string* answer) {
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

std::optional<json::object> Daemon::job_view(const std::string& id) {
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

json::object Daemon::wait_finished(const std::string& id, std::chrono::milliseconds limit) {
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

} // namespace keval::test::adversarial
