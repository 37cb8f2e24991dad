// The report written at exit: ComputeEval's PerformanceMetrics JSON, built from the state.
#pragma once

#include <cstdint>
#include <string>

namespace keval::profiler {

struct State;

// Attributes the kept kernels and copies to NVTX ranges and renders the JSON. Takes the state's
// records (call once, after the final flush and with State::finished set).
std::string build_report(State& s, uint64_t exit_ts);

// Writes `text` to `path` through a temporary file in the same directory and a rename, so a
// reader sees the whole report or none. False, with the reason, on failure.
bool write_atomically(const std::string& path, const std::string& text, std::string* why);

} // namespace keval::profiler
