// Files beneath a directory, reached without following any symlink on the way: a workspace that
// user code has had its hands on may hold links to anywhere (the state directory, /etc), and the
// trusted process that reads a profile back or writes a file must never be sent there by one.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace keval {

// Creates (or truncates) `root`/`relative` with `content`, making its directories (0755) as
// needed; `relative` is '/'-separated and already checked (request::path_problem). Throws
// std::system_error, naming the path, when a component is a symlink or not a directory.
void write_file_beneath(const std::filesystem::path& root, std::string_view relative,
                        std::string_view content, unsigned mode = 0644);

// The content of the regular file `root`/`relative`, or nullopt with `why` set ("is a
// symlink", "is larger than 16777216 bytes", "does not exist").
std::optional<std::string> read_file_beneath(const std::filesystem::path& root,
                                             std::string_view relative, size_t max_bytes,
                                             std::string* why);

// The bytes behind `fd` from its start (a handed-over file, a cache entry's descriptor). Throws
// std::system_error when it cannot be read, std::length_error past `max_bytes`.
std::string read_descriptor(int fd, size_t max_bytes);

} // namespace keval
