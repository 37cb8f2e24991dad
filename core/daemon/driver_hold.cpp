#include "daemon/driver_hold.hpp"

#include "daemon/detail/helper_process.hpp"

namespace keval::daemon {

namespace json = boost::json;

DriverHold::DriverHold(const std::filesystem::path& worker_exe,
                       std::chrono::milliseconds answer_within) {
  detail::HelperProcess::Started started = detail::HelperProcess::start(
      worker_exe, {"--hold-driver"}, "", "held", "a hold", answer_within);
  if (!started.process) {
    reason_ = std::move(started.failure);
    return;
  }
  if (const json::value* ms = started.answer.if_contains("init_ms"); ms && ms->is_number())
    init_ms_ = ms->to_number<double>();
  holder_ = std::move(started.process);
}

DriverHold DriverHold::none(std::string why) {
  DriverHold hold;
  hold.reason_ = std::move(why);
  return hold;
}

DriverHold::DriverHold(DriverHold&&) noexcept = default;

DriverHold::~DriverHold() = default; // the holder ends with holder_

bool DriverHold::held() const {
  return holder_ && holder_->running();
}

json::object DriverHold::status() const {
  if (!holder_)
    return {{"held", false}, {"reason", reason_}};
  if (!holder_->running())
    return {{"held", false},
            {"reason", "its holder (pid " + std::to_string(holder_->pid()) +
                           ") ended: " + holder_->ended_how()}};
  json::object out{{"held", true}, {"pid", holder_->pid()}};
  if (init_ms_)
    out["init_ms"] = *init_ms_;
  return out;
}

} // namespace keval::daemon
