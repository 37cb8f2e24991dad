#include "worker/engine/work_queues.hpp"

#include <cstdlib>

namespace keval::worker {

namespace {

constexpr const char* kConnections = "CUDA_DEVICE_MAX_CONNECTIONS";
// Set beside it when keval, not the operator, chose the one queue.
constexpr const char* kOwnMarker = "KEVAL_ONE_WORK_QUEUE";

bool names(std::string_view entry, std::string_view variable) {
  return entry.size() > variable.size() && entry.substr(0, variable.size()) == variable &&
         entry[variable.size()] == '=';
}

} // namespace

void use_one_work_queue() {
  if (std::getenv(kConnections) != nullptr)
    return; // the operator's, or already ours
  ::setenv(kConnections, "1", 1);
  ::setenv(kOwnMarker, "1", 1);
}

bool is_own_work_queue_setting(std::string_view entry) {
  if (names(entry, kOwnMarker))
    return true;
  return std::getenv(kOwnMarker) != nullptr && names(entry, kConnections);
}

} // namespace keval::worker
