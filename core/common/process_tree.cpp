#include "common/process_tree.hpp"

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

namespace keval {

namespace {

// A small /proc file, whole (close-on-exec: a worker forked meanwhile must not inherit it).
std::optional<std::string> read_small_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return std::nullopt;
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      ::close(fd);
      if (n < 0)
        return std::nullopt;
      return text;
    }
    text.append(buffer, static_cast<size_t>(n));
  }
}

template <class Number> std::optional<Number> parse_number(std::string_view text) {
  Number value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data())
    return std::nullopt;
  return value;
}

// The whitespace-separated numbers in `text`, appended to `out`.
void append_pids(std::string_view text, std::vector<pid_t>& out) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t start = text.find_first_not_of(" \n", i);
    if (start == std::string_view::npos)
      break;
    const size_t end = std::min(text.find_first_of(" \n", start), text.size());
    if (auto pid = parse_number<pid_t>(text.substr(start, end - start)); pid && *pid > 0)
      out.push_back(*pid);
    i = end;
  }
}

// The numeric entries of a /proc directory.
std::vector<pid_t> numeric_entries(const char* dir) {
  std::vector<pid_t> ids;
  DIR* d = ::opendir(dir); // glibc opens it close-on-exec
  if (d == nullptr)
    return ids;
  while (const dirent* entry = ::readdir(d))
    if (auto id = parse_number<pid_t>(entry->d_name); id && *id > 0)
      ids.push_back(*id);
  ::closedir(d);
  return ids;
}

} // namespace

namespace {

std::optional<ProcStat> parse_proc_stat(const std::optional<std::string>& text) {
  if (!text)
    return std::nullopt;
  // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses, so fields are
  // counted from the last ')'. ppid is field 4, starttime field 22.
  const size_t paren = text->rfind(')');
  if (paren == std::string::npos)
    return std::nullopt;
  std::string_view rest(*text);
  rest.remove_prefix(paren + 1);
  std::optional<pid_t> parent;
  std::optional<uint64_t> start_time;
  char state = '?';
  int field = 2; // the ')' closes field 2
  size_t i = 0;
  while (i < rest.size() && !(parent && start_time)) {
    const size_t start = rest.find_first_not_of(' ', i);
    if (start == std::string_view::npos)
      break;
    const size_t end = std::min(rest.find(' ', start), rest.size());
    ++field;
    if (field == 3)
      state = rest[start];
    else if (field == 4)
      parent = parse_number<pid_t>(rest.substr(start, end - start));
    else if (field == 22)
      start_time = parse_number<uint64_t>(rest.substr(start, end - start));
    i = end;
  }
  if (!parent || !start_time)
    return std::nullopt;
  return ProcStat{state, *parent, *start_time};
}

// The children of the process whose /proc directory is `dir` ("/proc/self" or "/proc/<pid>"),
// `pid` being its number; none once it has ended (without this, a gone process would cost a scan
// of every process's parent field).
std::vector<pid_t> children_in(const std::string& dir, pid_t pid) {
  std::vector<pid_t> children;
  const std::vector<pid_t> threads = numeric_entries((dir + "/task").c_str());
  if (threads.empty())
    return children;
  bool have_children_files = false;
  for (const pid_t tid : threads) {
    const auto text = read_small_file(dir + "/task/" + std::to_string(tid) + "/children");
    if (!text)
      continue; // the thread has ended, or the kernel lacks CONFIG_PROC_CHILDREN
    have_children_files = true;
    append_pids(*text, children);
  }
  if (have_children_files)
    return children;
  for (const pid_t other : numeric_entries("/proc"))
    if (const auto stat = read_proc_stat(other); stat && stat->parent == pid)
      children.push_back(other);
  return children;
}

} // namespace

std::optional<ProcStat> read_proc_stat(pid_t pid) {
  return parse_proc_stat(read_small_file("/proc/" + std::to_string(pid) + "/stat"));
}

std::vector<pid_t> children_of_self() {
  return children_in("/proc/self", ::getpid());
}

std::vector<pid_t> children_of(pid_t pid) {
  return children_in("/proc/" + std::to_string(pid), pid);
}

void add_process_tree(pid_t root, std::set<pid_t>& out) {
  std::vector<pid_t> pending{root};
  while (!pending.empty()) {
    const pid_t pid = pending.back();
    pending.pop_back();
    if (!out.insert(pid).second)
      continue;
    for (const pid_t child : children_of(pid))
      pending.push_back(child);
  }
}

std::vector<pid_t> threads_of(pid_t pid) {
  return numeric_entries(("/proc/" + std::to_string(pid) + "/task").c_str());
}

std::optional<char> thread_state(pid_t pid, pid_t tid) {
  const auto stat = parse_proc_stat(
      read_small_file("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/stat"));
  if (!stat)
    return std::nullopt;
  return stat->state;
}

std::optional<uid_t> uid_of(pid_t pid) {
  const auto text = read_small_file("/proc/" + std::to_string(pid) + "/status");
  if (!text)
    return std::nullopt;
  const size_t line = text->find("\nUid:");
  if (line == std::string::npos)
    return std::nullopt;
  const size_t start = text->find_first_not_of(" \t", line + 5);
  if (start == std::string::npos)
    return std::nullopt;
  const size_t end = text->find_first_of(" \t\n", start);
  return parse_number<uid_t>(std::string_view(*text).substr(start, end - start));
}

} // namespace keval
