#include "saxpy.h"

#include <algorithm>

void fill_value(int n, float value, float* y) {
  if (n > 0)
    std::fill(y, y + n, value);
}

// Off by one: the last element is never updated.
void saxpy(int n, float a, const float* x, float* y) {
  if (n > 1)
    std::transform(x, x + n - 1, y, y, [a](float xi, float yi) { return a * xi + yi; });
}
