#include "host_sum.h"

long long host_sum(const int* values, int n) {
  long long total = 0;
  for (int i = 0; i < n; ++i)
    total += values[i];
  return total;
}
