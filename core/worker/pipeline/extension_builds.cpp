#include "worker/pipeline/extension_builds.hpp"

#include "common/beneath.hpp"
#include "store/detail/blob_store.hpp"
#include "worker/artifacts/artifact_cache.hpp"
#include "worker/runner/runner_protocol.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <functional>
#include <map>
#include <vector>

#include <boost/json/serialize.hpp>

namespace keval::worker {

namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

constexpr const char* kKind = "torch_cuda_extension";
constexpr int kKeyFormat = 1;
constexpr size_t kMaxLibraryBytes = 256u << 20;
constexpr size_t kMaxToolchainBytes = 64u << 10;
constexpr size_t kMaxNameBytes = 256;
constexpr size_t kMaxUnits = 64;
constexpr size_t kMaxFlags = 256;
constexpr size_t kMaxSteps = 64;

bool is_identifier(std::string_view text) {
  if (text.empty() || text.size() > 128 || (text[0] >= '0' && text[0] <= '9'))
    return false;
  for (const char c : text)
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
      return false;
  return true;
}

// A unit's file name: written as it is into the builder's directory.
bool is_file_name(std::string_view text) {
  if (text.empty() || text.size() > 128 || text[0] == '.')
    return false;
  for (const char c : text)
    if (!(c == '_' || c == '-' || c == '.' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9')))
      return false;
  return true;
}

// Objects with their keys in order, recursively: one text for one content, whatever order the
// runner wrote it in.
json::value canonical(const json::value& value) {
  if (value.is_array()) {
    json::array out;
    for (const json::value& v : value.get_array())
      out.push_back(canonical(v));
    return out;
  }
  if (!value.is_object())
    return value;
  std::vector<std::pair<std::string, const json::value*>> fields;
  for (const auto& [key, v] : value.get_object())
    fields.emplace_back(std::string(key), &v);
  std::sort(fields.begin(), fields.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  json::object out;
  for (const auto& [key, v] : fields)
    out[key] = canonical(*v);
  return out;
}

// Checks `o[key]` is an array of at most `limit` elements (`shape` names what it must be,
// `noun` its elements), each passing `element` (which adds its size to `bytes`), or says why not.
std::string check_list(
    const json::object& o, const char* key, const std::string& at, size_t limit, const char* shape,
    const char* noun,
    const std::function<std::string(const json::value&, const std::string&, size_t&)>& element,
    size_t& bytes) {
  const json::value* v = o.if_contains(key);
  const std::string path = at + "." + key;
  if (v == nullptr || !v->is_array())
    return path + ": must be " + shape;
  if (v->get_array().size() > limit)
    return path + ": more than " + std::to_string(limit) + " " + noun;
  for (size_t i = 0; i < v->get_array().size(); ++i)
    if (std::string why = element(v->get_array()[i], path + "[" + std::to_string(i) + "]", bytes);
        !why.empty())
      return why;
  return {};
}

// A flag: a string.
std::string check_flag(const json::value& flag, const std::string& at, size_t& bytes) {
  if (!flag.is_string())
    return at + ": must be a string";
  bytes += flag.get_string().size();
  return {};
}

// A translation unit: a [file name, text] pair.
std::string check_unit(const json::value& unit, const std::string& at, size_t& bytes) {
  if (!unit.is_array() || unit.get_array().size() != 2 || !unit.get_array()[0].is_string() ||
      !unit.get_array()[1].is_string())
    return at + ": must be a [file name, text] pair";
  if (!is_file_name(unit.get_array()[0].get_string()))
    return at + "[0]: a file name is letters, digits, '_', '-' and '.', not first";
  bytes += unit.get_array()[1].get_string().size();
  return {};
}

RunnerClient::Answer unavailable(const std::string& why) {
  RunnerClient::Answer answer;
  answer.reply["ok"] = false;
  answer.reply["unavailable"] = why;
  return answer;
}

} // namespace

ParsedExtensionRequest parse_extension_request(const json::object& message) {
  const std::string at = "build_request";
  const auto refuse = [](std::string why) { return ParsedExtensionRequest{std::nullopt, why}; };
  const json::value* kind = message.if_contains("kind");
  if (kind == nullptr || !kind->is_string() || kind->get_string() != kKind)
    return refuse(at + ".kind: must be \"" + kKind + "\"");
  const json::value* module = message.if_contains("module");
  if (module == nullptr || !module->is_string() || !is_identifier(module->get_string()))
    return refuse(at + ".module: must be a Python identifier of at most 128 characters");
  const json::value* toolchain = message.if_contains("toolchain");
  if (toolchain == nullptr || !toolchain->is_object())
    return refuse(at + ".toolchain: must be an object");
  if (json::serialize(*toolchain).size() > kMaxToolchainBytes)
    return refuse(at + ".toolchain: larger than " + std::to_string(kMaxToolchainBytes) + " bytes");
  const json::value* extension = message.if_contains("extension");
  if (extension == nullptr || !extension->is_object())
    return refuse(at + ".extension: must be an object");
  const json::object& e = extension->get_object();
  const std::string e_at = at + ".extension";
  // Nothing unknown: whatever the builder reads of the request is in the key.
  static const std::vector<std::string> kFields{
      "name",          "cpp_units", "cuda_units", "extra_cflags", "extra_cuda_cflags",
      "extra_ldflags", "with_cuda"};
  for (const auto& [key, value] : e)
    if (std::find(kFields.begin(), kFields.end(), std::string(key)) == kFields.end())
      return refuse(e_at + "." + std::string(key) + ": not a field the builder takes");
  const json::value* name = e.if_contains("name");
  if (name == nullptr || !name->is_string() || name->get_string().size() > kMaxNameBytes)
    return refuse(e_at + ".name: must be a string of at most " + std::to_string(kMaxNameBytes) +
                  " bytes");
  size_t bytes = 0;
  for (const char* units : {"cpp_units", "cuda_units"})
    if (std::string why =
            check_list(e, units, e_at, kMaxUnits, "an array of [file name, text] pairs", "units",
                       check_unit, bytes);
        !why.empty())
      return refuse(why);
  for (const char* flags : {"extra_cflags", "extra_cuda_cflags", "extra_ldflags"})
    if (std::string why = check_list(e, flags, e_at, kMaxFlags, "an array of strings", "flags",
                                     check_flag, bytes);
        !why.empty())
      return refuse(why);
  const json::value* with_cuda = e.if_contains("with_cuda");
  if (with_cuda == nullptr || !with_cuda->is_bool())
    return refuse(e_at + ".with_cuda: must be true or false");
  if (bytes > kMaxExtensionRequestBytes)
    return refuse(e_at + ": units and flags hold more than " +
                  std::to_string(kMaxExtensionRequestBytes >> 20) + " MiB");
  ExtensionRequest request;
  request.module = std::string(module->get_string());
  request.toolchain = canonical(*toolchain).as_object();
  request.extension = canonical(*extension).as_object();
  return {std::move(request), {}};
}

namespace {

// What the builder is sent, and what the key is computed over (with the format and the
// architecture): one serialisation, so nothing the builder reads is left out of the key.
json::object builder_request(const ExtensionRequest& request) {
  return json::object{{"module", request.module},
                      {"toolchain", request.toolchain},
                      {"extension", request.extension}};
}

} // namespace

std::string extension_key(const ExtensionRequest& request, int cuda_arch) {
  const json::object material{{"format", kKeyFormat},
                              {"kind", kKind},
                              {"cuda_arch", cuda_arch},
                              {"request", builder_request(request)}};
  return store::detail::sha256_hex(json::serialize(material));
}

ExtensionBuilds::ExtensionBuilds(RunnerSource& runners, fs::path plugin, int cuda_arch,
                                 fs::path cache_root, std::string why_no_cache)
    : runners_(runners), plugin_(std::move(plugin)), cuda_arch_(cuda_arch),
      cache_root_(std::move(cache_root)), why_no_cache_(std::move(why_no_cache)) {}

RunnerClient::Answer ExtensionBuilds::answer(const json::object& message) {
  const ParsedExtensionRequest parsed = parse_extension_request(message);
  if (!parsed.request) {
    RunnerClient::Answer refused;
    refused.reply["ok"] = false;
    refused.reply["refused"] = parsed.error;
    return refused;
  }
  if (cuda_arch_ <= 0)
    return unavailable("no GPU architecture is known to build for");
  try {
    return build_and_answer(*parsed.request, extension_key(*parsed.request, cuda_arch_));
  } catch (const std::exception& e) { // the cache itself (its directory, its lock)
    return unavailable(std::string("the build cache failed: ") + e.what());
  }
}

RunnerClient::Answer ExtensionBuilds::build_and_answer(const ExtensionRequest& request,
                                                       const std::string& key) {
  const auto started = std::chrono::steady_clock::now();
  std::string why_unavailable, failure_message, failure_output;
  json::array steps;
  const auto build = [&]() -> std::optional<std::map<std::string, std::string>> {
    std::unique_ptr<RunnerClient> builder;
    try {
      builder = runners_.take(runner_msg::kBuildSide);
    } catch (const std::exception& e) {
      why_unavailable = std::string("the builder could not start: ") + e.what();
      return std::nullopt;
    }
    try {
      const json::object loaded = builder->call(json::object{{"type", runner_msg::kLoad},
                                                             {"plugin", plugin_.string()},
                                                             {"device", false}},
                                                "loading its plugin");
      if (!RunnerClient::ok(loaded)) {
        why_unavailable = "the builder could not load " + plugin_.filename().string() + ": " +
                          RunnerClient::error_of(loaded).message;
        return std::nullopt;
      }
      const std::string directory = builder->directory();
      const json::object reply =
          builder->call(json::object{{"type", runner_msg::kCompile},
                                     {"source_code", json::serialize(builder_request(request))},
                                     {"metadata", "{}"},
                                     {"work_dir", directory},
                                     {"cuda_arch", cuda_arch_},
                                     {"side", runner_msg::kBuildSide}},
                        "building an extension");
      if (!RunnerClient::ok(reply)) {
        const RunnerError error = RunnerClient::error_of(reply);
        if (error.type == "compile_error") {
          failure_message = error.message;
          failure_output = error.details;
        } else {
          why_unavailable = "the builder: " + error.message;
        }
        return std::nullopt;
      }
      const json::value* info = reply.if_contains("info");
      const json::value* built =
          info != nullptr && info->is_object() ? info->get_object().if_contains("build") : nullptr;
      const json::value* library = built != nullptr && built->is_object()
                                       ? built->get_object().if_contains("library")
                                       : nullptr;
      if (library == nullptr || !library->is_string()) {
        why_unavailable = "the builder named no library";
        return std::nullopt;
      }
      if (const json::value* s = built->get_object().if_contains("steps");
          s != nullptr && s->is_array())
        for (const json::value& step : s->get_array())
          if (step.is_object() && steps.size() < kMaxSteps)
            steps.push_back(step);
      // The builder names it, and its compilers may have run code of the request's: a name
      // outside its directory (a "..", a symlink on the way: read_file_beneath refuses both) is
      // refused, never read.
      const fs::path relative =
          fs::path(library->get_string().c_str()).lexically_relative(directory);
      std::string why;
      auto bytes = !relative.empty()
                       ? read_file_beneath(directory, relative.string(), kMaxLibraryBytes, &why)
                       : std::nullopt;
      if (!bytes) {
        why_unavailable = "the builder's library " + std::string(library->get_string()) +
                          " cannot be read beneath its directory" +
                          (why.empty() ? std::string() : ": " + why);
        return std::nullopt;
      }
      std::map<std::string, std::string> files;
      files.emplace("library", std::move(*bytes));
      return files;
    } catch (const RunnerFailure& failure) {
      why_unavailable = failure.what();
      return std::nullopt;
    }
  };
  ArtifactCache cache(cache_root_, why_no_cache_);
  std::optional<ArtifactCache::Entry> entry = cache.get_or_build(key, build);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!entry || entry->files.count("library") == 0) {
    if (!failure_message.empty()) {
      RunnerClient::Answer failed;
      failed.reply["ok"] = false;
      failed.reply["failed"] = json::object{
          {"message", failure_message}, {"output", failure_output}, {"steps", std::move(steps)}};
      return failed;
    }
    return unavailable(why_unavailable.empty() ? "the build left no library" : why_unavailable);
  }
  RunnerClient::Answer answer;
  answer.reply["ok"] = true;
  answer.reply["module"] = request.module;
  answer.reply["cache"] = entry->reused ? "reused" : "built";
  answer.reply["key"] = key;
  answer.reply["seconds"] = std::round(seconds * 1000.0) / 1000.0;
  if (!cache.enabled())
    answer.reply["not_kept"] = cache.why_disabled();
  if (!entry->reused)
    answer.reply["steps"] = std::move(steps);
  answer.fds.push_back(std::move(entry->files.at("library")));
  return answer;
}

} // namespace keval::worker
