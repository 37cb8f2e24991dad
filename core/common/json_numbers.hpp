// Numbers JSON text cannot carry. Boost.JSON parses a literal beyond a double's range (8e322) as
// inf and writes inf and NaN as Infinity and NaN, which no parser reads back: such a number must
// be refused where it enters (a request, a frame) and never written into a frame.
#pragma once

#include <optional>
#include <string>

#include <boost/json/value.hpp>

namespace keval {

// The path ("a.b[2]", "" for `value` itself) of the first number in `value` that is not finite,
// or nullopt when every number is.
std::optional<std::string> non_finite_number_at(const boost::json::value& value);

} // namespace keval
