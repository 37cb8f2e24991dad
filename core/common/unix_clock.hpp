#pragma once

#include <chrono>

namespace keval {

// Now, in milliseconds since the Unix epoch on the machine's real-time clock: what the host and
// its workers stamp the moments they share with each other (one machine, one clock), unlike
// their steady clocks' durations.
inline double unix_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

} // namespace keval
