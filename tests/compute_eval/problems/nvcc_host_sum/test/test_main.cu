// Held-out harness of KEVAL/nvcc_host_sum: exit code 0 when every check passes, 1 otherwise.
#include "check.h"

#include <climits>
#include <cstdio>
#include <vector>

int main() {
  bool ok = true;

  ok &= check_sum("empty", nullptr, 0);

  const int one[] = {42};
  ok &= check_sum("one", one, 1);

  std::vector<int> small(1000);
  for (int i = 0; i < 1000; ++i)
    small[i] = (i % 7) - 3;
  ok &= check_sum("small", small.data(), static_cast<int>(small.size()));

  // Sums far beyond INT_MAX, both ways.
  std::vector<int> big(1 << 16, INT_MAX);
  ok &= check_sum("big positive", big.data(), static_cast<int>(big.size()));
  std::vector<int> neg(1 << 16, INT_MIN);
  ok &= check_sum("big negative", neg.data(), static_cast<int>(neg.size()));

  std::vector<int> mixed(1 << 20);
  unsigned state = 12345u;
  for (auto& v : mixed) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<int>(state);
  }
  ok &= check_sum("mixed", mixed.data(), static_cast<int>(mixed.size()));

  std::printf(ok ? "nvcc_host_sum: all checks passed\n" : "nvcc_host_sum: checks failed\n");
  return ok ? 0 : 1;
}
