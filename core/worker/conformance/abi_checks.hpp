// The plugin's side of `keval conformance`: what the SDK promises a host, checked by calling the
// plugin's table directly (keval-worker --conformance PLUGIN.so [--request FILE]).
//
// A first line {"checks": [names]}, then one JSON line per check, in that order, flushed as each
// ends: {"check", "status": "pass" |
// "fail" | "skip", "detail"}. A check that crashes the process leaves its line missing; the CLI,
// which knows the order, reports that check as the one that crashed. Checks that call compile run
// on a thread other than the one that loaded the library (the host promises one serving thread,
// not which one).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace keval::worker::conformance {

// The checks, in the order they run and print.
inline constexpr const char* kAbiChecks[] = {
    "loads",          // the entry symbol, a table of at least the 1.0 size, the required entries
    "manifest",       // kernel_type, semver, description, known capability bits, a device, stable
    "versioning",     // api_minor names the newest feature used (an older host can tell)
    "prewarm",        // optional; when present it returns success or an error it lets go of
    "compile_error",  // a source that cannot compile: KEVAL_ERROR_COMPILE, a message, no kernel
    "newer_host",     // argument structs larger than the plugin knows: same answer, nothing
                      // written past the result struct the plugin knows
    "compile",        // the sample request's source compiles; its info is a JSON object
    "kernel_destroy", // releases the sample's kernel; NULL is ignored
};

// The sample: the request side whose kernel_type is the plugin's, with the IOContract it or the
// other side carries. Without it, "compile" and "kernel_destroy" are skipped.
struct Sample {
  std::string source;
  std::string metadata_json = "{}";
  std::optional<std::string> io_json;
  std::string side = "custom";
};

// Reads the sample for `kernel_type` from a request file (evaluate or compare); nullopt when no
// side has that type. Throws std::runtime_error when the file cannot be read or parsed.
std::optional<Sample> sample_from_request(const std::filesystem::path& request_file,
                                          const std::string& kernel_type);

// Runs every check against `plugin`, printing its lines to stdout. 0 when none failed. A CUDA
// type compiles for `target_arch` (major*10+minor), as the host would pass it. A compile that
// answers KEVAL_ERROR_UNSUPPORTED (a framework or device this machine lacks) is a skip, with
// its reason.
int run_abi_checks(const std::filesystem::path& plugin,
                   const std::optional<std::filesystem::path>& request_file, int32_t target_arch);

} // namespace keval::worker::conformance
