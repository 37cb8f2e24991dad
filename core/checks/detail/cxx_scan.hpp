// The C++/CUDA pass of the static scan: cuda sources, and the load_inline sources that the
// Python pass collects.
#pragma once

#include "checks/detail/findings.hpp"

#include <string_view>

namespace keval::checks::detail {

// Scans `text` as C++ without comments: names and calls (fork, dlsym, cudaStreamCreate,
// cudaEventElapsedTime, std::thread...), #include lines, device globals and static caches, and
// torch calls in catch blocks. Byte 0x01 ends whatever string or comment is open and starts a new
// translation unit; 0x02 ends a line without counting one (see scan_python).
void scan_cxx(std::string_view text, Findings& out);

} // namespace keval::checks::detail
