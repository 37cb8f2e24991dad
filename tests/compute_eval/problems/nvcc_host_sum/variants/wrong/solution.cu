#include "host_sum.h"

// Accumulates in an int: the large sums wrap around.
long long host_sum(const int* values, int n) {
  int total = 0;
  for (int i = 0; i < n; ++i)
    total = static_cast<int>(static_cast<unsigned>(total) + static_cast<unsigned>(values[i]));
  return total;
}
