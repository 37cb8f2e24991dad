#include "check.h"
#include "host_sum.h"

#include <cstdio>

long long reference_sum(const int* values, int n) {
  // Pairs summed in 64 bits, a different order than a plain loop.
  long long total = 0;
  int i = 0;
  for (; i + 1 < n; i += 2)
    total += static_cast<long long>(values[i]) + static_cast<long long>(values[i + 1]);
  if (i < n)
    total += values[i];
  return total;
}

bool check_sum(const char* name, const int* values, int n) {
  const long long got = host_sum(values, n);
  const long long want = reference_sum(values, n);
  if (got != want) {
    std::printf("FAIL %s (n=%d): got %lld, expected %lld\n", name, n, got, want);
    return false;
  }
  return true;
}
