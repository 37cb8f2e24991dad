#include "worker/engine/work_queues.hpp"

#include <cstdlib>
#include <string>

namespace keval::worker {

namespace {

constexpr const char* kConnections = "CUDA_DEVICE_MAX_CONNECTIONS";
// "1" beside it when keval, not the operator, chose the one queue; "0" from the operator turns
// the choice off (the driver's default everywhere), and is passed on to every child.
constexpr const char* kOwnMarker = "KEVAL_ONE_WORK_QUEUE";

bool marker_is(const char* value) {
  const char* marker = std::getenv(kOwnMarker);
  return marker != nullptr && std::string_view(marker) == value;
}

bool names(std::string_view entry, std::string_view variable) {
  return entry.size() > variable.size() && entry.substr(0, variable.size()) == variable &&
         entry[variable.size()] == '=';
}

} // namespace

void use_one_work_queue() {
  if (std::getenv(kConnections) != nullptr || marker_is("0"))
    return; // the operator's number, already ours, or turned off
  ::setenv(kConnections, "1", 1);
  ::setenv(kOwnMarker, "1", 1);
}

bool is_own_work_queue_setting(std::string_view entry) {
  if (entry == std::string(kOwnMarker) + "=1")
    return true;
  return marker_is("1") && names(entry, kConnections);
}

} // namespace keval::worker
