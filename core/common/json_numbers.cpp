#include "common/json_numbers.hpp"

#include <cmath>

namespace keval {

namespace {

std::optional<std::string> walk(const boost::json::value& value, const std::string& path) {
  if (value.is_double())
    return std::isfinite(value.get_double()) ? std::nullopt : std::optional<std::string>(path);
  if (const auto* object = value.if_object()) {
    for (const auto& [key, member] : *object)
      if (auto at = walk(member, path.empty() ? std::string(key) : path + "." + std::string(key)))
        return at;
  } else if (const auto* array = value.if_array()) {
    for (size_t i = 0; i < array->size(); ++i)
      if (auto at = walk((*array)[i], path + "[" + std::to_string(i) + "]"))
        return at;
  }
  return std::nullopt;
}

} // namespace

std::optional<std::string> non_finite_number_at(const boost::json::value& value) {
  return walk(value, "");
}

} // namespace keval
