#include "common/remove_tree.hpp"

#include <system_error>

#include <sys/stat.h>

namespace keval {

namespace fs = std::filesystem;

namespace {

// Depth-first: a directory is opened for its owner before it is listed. Symbolic links are
// entries like any other (lstat), so nothing outside `dir` is touched.
void open_up(const fs::path& dir, int depth) {
  struct stat st {};
  if (depth > 4096 || ::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return;
  if ((st.st_mode & S_IRWXU) != S_IRWXU)
    ::chmod(dir.c_str(), (st.st_mode & 07777) | S_IRWXU);
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec) && !it->is_symlink(ec))
      open_up(it->path(), depth + 1);
}

} // namespace

bool remove_tree(const fs::path& dir, std::string* why) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) {
    // Only the slow path pays for the walk.
    open_up(dir, 0);
    ec.clear();
    fs::remove_all(dir, ec);
  }
  if (ec && why != nullptr)
    *why = "removing " + dir.string() + ": " + ec.message();
  return !ec;
}

} // namespace keval
