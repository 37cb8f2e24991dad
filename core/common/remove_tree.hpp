// Removing a directory tree that user code wrote: std::filesystem::remove_all stops at the first
// directory it may not read or write, and a candidate can leave one (chmod 000) to keep its files
// on disk. For an owner that is not root, permission on one's own directories is a chmod away.
#pragma once

#include <filesystem>
#include <string>

namespace keval {

// Removes `dir` and everything under it, first giving its owner rwx on every directory inside
// (symbolic links are removed, never followed). True when nothing is left; otherwise false with
// the first failure in `why` (when not null). A missing `dir` counts as removed.
bool remove_tree(const std::filesystem::path& dir, std::string* why = nullptr);

} // namespace keval
