#include "worker/runner/program_commands.hpp"

#include "common/beneath.hpp"
#include "worker/runner/detail/wire.hpp"

#include <filesystem>
#include <stdexcept>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <unistd.h>

namespace keval::worker::program_commands {

namespace json = boost::json;
using detail::WireError;

namespace {

// Harness objects and the like: bounded so that a descriptor cannot make the runner read forever.
constexpr size_t kMaxFileFromFd = 256u << 20;

} // namespace

json::object plan(const LoadedPlugin& plugin, const json::object& command) {
  const auto entry = plugin.plan_program();
  if (entry == nullptr)
    throw std::runtime_error("plugin " + plugin.path().string() + " has no plan_program entry");
  const std::string program = json::serialize(detail::object_field(command, "program"));
  const std::string which = detail::string_field(command, "which");
  const std::string environment = json::serialize(detail::object_field(command, "environment"));
  keval_program_args args{};
  args.struct_size = sizeof args;
  args.program_json = program.c_str();
  args.which = which.c_str();
  args.environment_json = environment.c_str();
  const char* plan_json = nullptr;
  PluginError error(plugin.api(), entry(&args, &plan_json));
  if (error)
    throw std::runtime_error("planning the program failed (" +
                             std::string(error_code_name(error.code())) + "): " + error.message() +
                             (error.details().empty() ? "" : "\n" + error.details()));
  if (plan_json == nullptr)
    throw std::runtime_error("plan_program reported success but returned no plan");
  json::value parsed = json::parse(plan_json);
  if (!parsed.is_object())
    throw std::runtime_error("plan_program returned JSON that is not an object");
  json::object reply;
  reply["plan"] = std::move(parsed.as_object());
  return reply;
}

json::object files(const json::object& command, protocol::BlockingChannel& channel) {
  const std::filesystem::path root = std::filesystem::current_path();
  for (const auto& value : detail::array_field(command, "files")) {
    if (!value.is_object())
      throw WireError("files: an entry is not an object");
    const json::object& f = value.as_object();
    write_file_beneath(root, detail::string_field(f, "path"), detail::string_field(f, "content"));
  }
  const json::value* from_fds = command.if_contains("from_fds");
  if (from_fds != nullptr && from_fds->is_array()) {
    std::vector<UniqueFd> fds = channel.take_fds(from_fds->as_array().size());
    size_t i = 0;
    for (const auto& value : from_fds->as_array()) {
      if (!value.is_object())
        throw WireError("files: a from_fds entry is not an object");
      // A cached build's program must stay runnable; harness objects need not be.
      const json::value* executable = value.as_object().if_contains("executable");
      const bool runnable = executable != nullptr && executable->is_bool() && executable->as_bool();
      write_file_beneath(root, detail::string_field(value.as_object(), "path"),
                         read_descriptor(fds[i++].get(), kMaxFileFromFd), runnable ? 0755 : 0644);
    }
  }
  return {};
}

} // namespace keval::worker::program_commands
