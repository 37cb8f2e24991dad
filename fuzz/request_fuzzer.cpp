// Fuzz target: a request body as POST /evaluate and POST /compare receive it — JSON text, the
// V2-contract model, IOContract validation (tensor specs, inline base64/zlib data, launch config),
// with the daemon's default limits. Checked:
// - parsing throws nothing but RequestError;
// - the 400 body built from a RequestError, and a parsed request's warnings, are valid JSON
//   text once serialized (a message echoing request bytes must not break the response);
// - a request that parsed parses again, the same, from the `original` it keeps (what the job
//   frame carries to the worker).
#include "request/parse.hpp"
#include "result/response.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

namespace {

using keval::request::EvalRequest;
using keval::request::RequestError;

[[noreturn]] void fail(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "request_fuzzer: %s %s\n", what, detail.c_str());
  std::abort();
}

// Serialized as the daemon would send it, the text must parse back (Boost.JSON checks UTF-8).
void check_serializes(const boost::json::value& value) {
  const std::string text = boost::json::serialize(value);
  boost::json::error_code ec;
  (void)boost::json::parse(text, ec);
  if (ec)
    fail("a response body is not valid JSON:", ec.message() + ": " + text.substr(0, 300));
}

void check_mode(std::string_view text, EvalRequest::Mode mode) {
  const keval::request::Limits limits; // the daemon's defaults
  EvalRequest parsed;
  try {
    parsed = keval::request::parse_request_text(text, mode, limits);
  } catch (const RequestError& e) {
    check_serializes(keval::result::bad_request_body(e.path(), e.message()));
    return;
  }
  boost::json::array warnings;
  for (const auto& warning : parsed.warnings)
    warnings.emplace_back(warning);
  check_serializes(warnings);
  EvalRequest again;
  try {
    again = keval::request::parse_request(boost::json::value(parsed.original), mode, limits);
  } catch (const RequestError& e) {
    fail("a parsed request's original does not parse again:", e.what());
  }
  if (again.kernel.source_code != parsed.kernel.source_code ||
      again.kernel.kernel_type != parsed.kernel.kernel_type ||
      again.ref.has_value() != parsed.ref.has_value() || again.num_trials != parsed.num_trials ||
      again.timeout_s != parsed.timeout_s || again.warnings != parsed.warnings)
    fail("a parsed request's original parses differently");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check_mode(text, EvalRequest::Mode::evaluate);
  check_mode(text, EvalRequest::Mode::compare);
  return 0;
}
