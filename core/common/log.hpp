// Logging: spdlog to stderr. stdout is reserved for results (CLI) and never used by the worker.
#pragma once

#include <spdlog/spdlog.h>

namespace keval {

// Sets up the process-wide stderr logger. `level` is an spdlog level name ("info", "debug",
// ...); KEVAL_LOG_LEVEL in the environment overrides it.
void init_logging(const char* process_name, const char* level = "info");

} // namespace keval
