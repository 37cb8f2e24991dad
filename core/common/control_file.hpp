// Writing the small kernel control files keval drives (cgroup.procs, memory.max, uid_map, ...):
// one write(2) of the whole text, as the kernel expects, and errno kept for the caller's message.
#pragma once

#include <filesystem>
#include <string>

namespace keval {

// True when `text` was written whole; false with errno set otherwise.
bool write_control_file(const std::filesystem::path& path, const std::string& text);

} // namespace keval
