// Sets (or, with nullopt, unsets) an environment variable for one scope, restoring what was there
// before: the worker and the plugins a test starts inherit the test's environment. Header-only,
// so suites that do not link the host-side test support can use it.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace keval::test {

class ScopedEnv {
public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name))
      old_ = old;
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
  const char* name_;
  std::optional<std::string> old_;
};

} // namespace keval::test
