// Held-out harness of KEVAL/host_saxpy: exit code 0 when every check passes, 1 otherwise.
#include "saxpy.h"

#include <cstdio>
#include <vector>

namespace {

constexpr float kSentinel = -12345.0f;
int failures = 0;

void expect(bool ok, const char* what, int n, int i, float got, float want) {
  if (!ok && failures++ < 10)
    std::printf("FAIL %s: n=%d i=%d got %g, expected %g\n", what, n, i, got, want);
}

void check(int n) {
  // One element past the end holds a sentinel that neither function may touch.
  std::vector<float> x(n + 1), y(n + 1, kSentinel);
  for (int i = 0; i <= n; ++i)
    x[i] = 0.5f * static_cast<float>(i) - 3.0f;

  fill_value(n, 2.0f, y.data());
  for (int i = 0; i < n; ++i)
    expect(y[i] == 2.0f, "fill_value", n, i, y[i], 2.0f);
  expect(y[n] == kSentinel, "fill_value wrote past n", n, n, y[n], kSentinel);

  saxpy(n, 3.0f, x.data(), y.data());
  for (int i = 0; i < n; ++i) {
    const float want = 3.0f * x[i] + 2.0f; // exact in float for these values
    expect(y[i] == want, "saxpy", n, i, y[i], want);
  }
  expect(y[n] == kSentinel, "saxpy wrote past n", n, n, y[n], kSentinel);
}

} // namespace

int main() {
  const int sizes[] = {0, 1, 7, 64, 1000};
  for (int n : sizes)
    check(n);
  if (failures != 0) {
    std::printf("host_saxpy: %d checks failed\n", failures);
    return 1;
  }
  std::printf("host_saxpy: all checks passed\n");
  return 0;
}
