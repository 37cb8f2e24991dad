#include "protocol/sandbox_policy.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include <boost/json/array.hpp>
#include <boost/json/parse.hpp>
#include <unistd.h>

namespace keval::protocol {

namespace json = boost::json;

const char* sandbox_mode_name(SandboxMode mode) {
  switch (mode) {
  case SandboxMode::standard:
    return "standard";
  case SandboxMode::strict:
    return "strict";
  case SandboxMode::off:
    return "off";
  }
  return "standard";
}

std::optional<SandboxMode> parse_sandbox_mode(std::string_view name) {
  for (SandboxMode m : {SandboxMode::standard, SandboxMode::strict, SandboxMode::off})
    if (name == sandbox_mode_name(m))
      return m;
  return std::nullopt;
}

bool switches_user(const SandboxPolicy& policy) {
  return ::geteuid() == 0 && policy.mode != SandboxMode::off && policy.job_uid != 0;
}

uint64_t default_job_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGE_SIZE);
  constexpr uint64_t kCap = 16ull << 30;
  if (pages <= 0 || page <= 0)
    return kCap;
  return std::min(kCap, static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 2);
}

json::object to_json(const SandboxPolicy& p) {
  json::object o;
  o["mode"] = sandbox_mode_name(p.mode);
  o["job_uid"] = p.job_uid;
  o["job_gid"] = p.job_gid;
  o["runner_uid_base"] = p.runner_uid_base;
  o["uid_of_pid"] = p.uid_of_pid;
  o["memory_bytes"] = p.memory_bytes;
  o["max_processes"] = p.max_processes;
  o["max_file_bytes"] = p.max_file_bytes;
  o["max_open_files"] = p.max_open_files;
  o["work_root"] = p.work_root;
  o["worker_tag"] = p.worker_tag;
  o["private_dir"] = p.private_dir;
  json::array writable;
  for (const auto& dir : p.shared_writable)
    writable.emplace_back(dir);
  o["shared_writable"] = std::move(writable);
  json::array readonly;
  for (const auto& dir : p.shared_readonly)
    readonly.emplace_back(dir);
  o["shared_readonly"] = std::move(readonly);
  o["runner_dir"] = p.runner_dir;
  o["cgroup_parent"] = p.cgroup_parent;
  o["cgroup"] = p.cgroup;
  o["cgroup_skipped"] = p.cgroup_skipped;
  o["background_nice"] = p.background_nice;
  return o;
}

namespace {

const json::value& field(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr)
    throw std::invalid_argument(std::string("sandbox policy: missing '") + key + "'");
  return *v;
}

uint64_t unsigned_at(const json::object& o, const char* key) {
  const json::value& v = field(o, key);
  if (v.is_uint64())
    return v.as_uint64();
  if (v.is_int64() && v.as_int64() >= 0)
    return static_cast<uint64_t>(v.as_int64());
  throw std::invalid_argument(std::string("sandbox policy: '") + key +
                              "' must be a non-negative integer");
}

std::string text_at(const json::object& o, const char* key) {
  const json::value& v = field(o, key);
  if (!v.is_string())
    throw std::invalid_argument(std::string("sandbox policy: '") + key + "' must be a string");
  return std::string(v.as_string());
}

} // namespace

SandboxPolicy parse_sandbox_policy(const json::object& o) {
  SandboxPolicy p;
  const std::string mode = text_at(o, "mode");
  const auto parsed = parse_sandbox_mode(mode);
  if (!parsed)
    throw std::invalid_argument("sandbox policy: 'mode' must be standard, strict or off, not '" +
                                mode + "'");
  p.mode = *parsed;
  p.job_uid = static_cast<uint32_t>(unsigned_at(o, "job_uid"));
  p.job_gid = static_cast<uint32_t>(unsigned_at(o, "job_gid"));
  p.runner_uid_base = static_cast<uint32_t>(unsigned_at(o, "runner_uid_base"));
  if (p.runner_uid_base > SandboxPolicy::kLargestRunnerUidBase)
    throw std::invalid_argument("sandbox policy: 'runner_uid_base' leaves no room for a pid");
  if (o.contains("uid_of_pid"))
    p.uid_of_pid = static_cast<uint32_t>(unsigned_at(o, "uid_of_pid"));
  p.memory_bytes = unsigned_at(o, "memory_bytes");
  p.max_processes = unsigned_at(o, "max_processes");
  p.max_file_bytes = unsigned_at(o, "max_file_bytes");
  p.max_open_files = unsigned_at(o, "max_open_files");
  p.work_root = text_at(o, "work_root");
  if (o.contains("worker_tag"))
    p.worker_tag = text_at(o, "worker_tag");
  if (p.worker_tag.find_first_not_of("0123456789abcdefghijklmnopqrstuvwxyz") != std::string::npos)
    throw std::invalid_argument("sandbox policy: 'worker_tag' must be digits and a-z");
  p.private_dir = text_at(o, "private_dir");
  const json::value& writable = field(o, "shared_writable");
  if (!writable.is_array())
    throw std::invalid_argument("sandbox policy: 'shared_writable' must be an array");
  for (const auto& dir : writable.as_array()) {
    if (!dir.is_string())
      throw std::invalid_argument("sandbox policy: 'shared_writable' holds a non-string");
    p.shared_writable.emplace_back(dir.as_string());
  }
  if (const json::value* readonly = o.if_contains("shared_readonly")) {
    if (!readonly->is_array())
      throw std::invalid_argument("sandbox policy: 'shared_readonly' must be an array");
    for (const auto& dir : readonly->as_array()) {
      if (!dir.is_string())
        throw std::invalid_argument("sandbox policy: 'shared_readonly' holds a non-string");
      p.shared_readonly.emplace_back(dir.as_string());
    }
  }
  p.runner_dir = text_at(o, "runner_dir");
  p.cgroup_parent = text_at(o, "cgroup_parent");
  p.cgroup = text_at(o, "cgroup");
  p.cgroup_skipped = text_at(o, "cgroup_skipped");
  if (o.contains("background_nice")) {
    const uint64_t nice = unsigned_at(o, "background_nice");
    if (nice > 19)
      throw std::invalid_argument("sandbox policy: 'background_nice' must be 0 to 19");
    p.background_nice = static_cast<int32_t>(nice);
  }
  return p;
}

SandboxPolicy parse_sandbox_policy(std::string_view json_text) {
  boost::system::error_code ec;
  const json::value v = json::parse(json_text, ec);
  if (ec || !v.is_object())
    throw std::invalid_argument("sandbox policy: not a JSON object");
  return parse_sandbox_policy(v.as_object());
}

std::optional<uint64_t> parse_byte_size(std::string_view text) {
  if (text.empty())
    return std::nullopt;
  uint64_t value = 0;
  size_t i = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    if (value > (UINT64_MAX - 9) / 10)
      return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(text[i] - '0');
  }
  if (i == 0)
    return std::nullopt;
  std::string_view suffix = text.substr(i);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b'))
    suffix.remove_suffix(1);
  if (!suffix.empty() && (suffix.back() == 'i'))
    suffix.remove_suffix(1);
  int shift = 0;
  if (suffix.size() == 1) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
    case 'K':
      shift = 10;
      break;
    case 'M':
      shift = 20;
      break;
    case 'G':
      shift = 30;
      break;
    case 'T':
      shift = 40;
      break;
    default:
      return std::nullopt;
    }
  } else if (!suffix.empty()) {
    return std::nullopt;
  }
  if (shift > 0 && value > (UINT64_MAX >> shift))
    return std::nullopt;
  return value << shift;
}

} // namespace keval::protocol
