#include "daemon/detail/connection_slots.hpp"

#include <algorithm>
#include <utility>

namespace keval::daemon::detail {

ConnectionSlots::Ticket::Ticket(Ticket&& other) noexcept
    : slots_(std::exchange(other.slots_, nullptr)), kind_(std::exchange(other.kind_, Kind::none)) {}

ConnectionSlots::Ticket& ConnectionSlots::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    release();
    slots_ = std::exchange(other.slots_, nullptr);
    kind_ = std::exchange(other.kind_, Kind::none);
  }
  return *this;
}

ConnectionSlots::Ticket::~Ticket() {
  release();
}

void ConnectionSlots::Ticket::release() {
  if (slots_ == nullptr)
    return;
  if (kind_ == Kind::serve)
    slots_->served_.fetch_sub(1);
  else if (kind_ == Kind::refuse)
    slots_->refusing_.fetch_sub(1);
  slots_ = nullptr;
  kind_ = Kind::none;
}

ConnectionSlots::ConnectionSlots(size_t max_served, size_t max_refusing)
    : max_served_(max_served), max_refusing_(max_refusing) {}

size_t ConnectionSlots::refusing_places_for(size_t max_served) {
  return std::max<size_t>(16, max_served / 8);
}

bool ConnectionSlots::take(std::atomic<size_t>& counter, size_t limit) {
  size_t current = counter.load();
  while (current < limit)
    if (counter.compare_exchange_weak(current, current + 1))
      return true;
  return false;
}

ConnectionSlots::Ticket ConnectionSlots::admit() {
  accepted_total_.fetch_add(1);
  if (take(served_, max_served_))
    return Ticket(this, Kind::serve);
  if (take(refusing_, max_refusing_)) {
    refused_total_.fetch_add(1);
    return Ticket(this, Kind::refuse);
  }
  dropped_total_.fetch_add(1);
  return Ticket();
}

ConnectionStats ConnectionSlots::stats() const {
  ConnectionStats s;
  s.open = served_.load();
  s.max = max_served_;
  s.refusing = refusing_.load();
  s.accepted_total = accepted_total_.load();
  s.refused_total = refused_total_.load();
  s.dropped_total = dropped_total_.load();
  return s;
}

} // namespace keval::daemon::detail
