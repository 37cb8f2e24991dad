#include "common/log.hpp"

#include <cstdlib>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace keval {

void init_logging(const char* process_name, const char* level) {
  auto logger = spdlog::stderr_color_mt(process_name);
  logger->set_pattern("[%H:%M:%S.%e] [%n] [%^%l%$] %v");
  const char* env = std::getenv("KEVAL_LOG_LEVEL");
  logger->set_level(spdlog::level::from_str(env != nullptr ? env : level));
  spdlog::set_default_logger(std::move(logger));
}

} // namespace keval
