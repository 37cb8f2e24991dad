// The daemon's connection limit (--max-connections). Every open connection costs a descriptor
// and a session; past the limit a new connection is still answered, 503 with a JSON error, by a
// few refusing sessions, so a client learns why instead of hanging; past those it is closed at
// once. Idle connections end on their own: every read has --http-timeout.
#pragma once

#include "daemon/job_stats.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace keval::daemon::detail {

class ConnectionSlots {
public:
  enum class Kind { none, serve, refuse };

  // A connection's place: served, or answered 503; released when the ticket goes.
  class Ticket {
  public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept;
    Ticket& operator=(Ticket&& other) noexcept;
    ~Ticket();
    Kind kind() const { return kind_; }

  private:
    friend class ConnectionSlots;
    Ticket(ConnectionSlots* slots, Kind kind) : slots_(slots), kind_(kind) {}
    void release();
    ConnectionSlots* slots_ = nullptr;
    Kind kind_ = Kind::none;
  };

  // At most `max_served` connections served at once, and `max_refusing` more being answered 503.
  ConnectionSlots(size_t max_served, size_t max_refusing);
  ConnectionSlots(const ConnectionSlots&) = delete;
  ConnectionSlots& operator=(const ConnectionSlots&) = delete;

  // A place for a connection just accepted: serve it if there is room, else refuse it (503) if a
  // refusing place is free, else none (close it unanswered). Thread-safe.
  Ticket admit();
  ConnectionStats stats() const;

  // The refusing places that go with `max_served`: enough to answer a burst, few enough to
  // bound what a flood costs.
  static size_t refusing_places_for(size_t max_served);

private:
  // Takes a place under `counter` if it stays within `limit`.
  static bool take(std::atomic<size_t>& counter, size_t limit);

  const size_t max_served_;
  const size_t max_refusing_;
  std::atomic<size_t> served_{0};
  std::atomic<size_t> refusing_{0};
  std::atomic<uint64_t> accepted_total_{0};
  std::atomic<uint64_t> refused_total_{0};
  std::atomic<uint64_t> dropped_total_{0};
};

} // namespace keval::daemon::detail
