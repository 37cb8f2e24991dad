// A result as a person reads it on a terminal: the verdict, the speedup, each side's median and
// p95 with the method that timed it, flags, the first lines of a compiler or validation error,
// and where the full result is. `keval evaluate|compare` prints it when stdout is a terminal;
// scripts (stdout not a terminal, or --json) get the response JSON unchanged.
#pragma once

#include <string>

#include <boost/json/object.hpp>

namespace keval::result {

struct SummaryOptions {
  std::string full_result_path; // where the whole response was written ("" = nowhere)
  bool color = false;           // ANSI colours (a terminal that has not asked for NO_COLOR)
};

// `body` is a V2 response or a rejected request's body (bad_request_body). Never throws on a
// body of the wrong shape: what is missing is left out.
std::string summarize(const boost::json::object& body, const SummaryOptions& options = {});

} // namespace keval::result
