#include "tensor/stats.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace keval::tensor {
namespace {

// numpy's percentile(method="linear") on sorted data, including its _lerp, which interpolates
// from the upper neighbour when t >= 0.5 so results stay monotonic and exact at the ends.
double percentile(const std::vector<double>& sorted, double percent) {
  const double position = percent / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  const double t = position - static_cast<double>(below);
  const double a = sorted[below], b = sorted[above];
  const double difference = b - a;
  return t >= 0.5 ? b - difference * (1.0 - t) : a + difference * t;
}

} // namespace

RuntimeStats compute_stats(std::vector<double> samples_ms) {
  if (samples_ms.empty())
    throw std::invalid_argument("compute_stats: no samples");
  if (!std::all_of(samples_ms.begin(), samples_ms.end(), [](double s) { return std::isfinite(s); }))
    throw std::invalid_argument("compute_stats: non-finite sample");
  std::sort(samples_ms.begin(), samples_ms.end());
  const size_t n = samples_ms.size();
  const double count = static_cast<double>(n);

  RuntimeStats stats;
  stats.count = static_cast<int64_t>(n);
  stats.min = samples_ms.front();
  stats.max = samples_ms.back();
  double sum = 0.0;
  for (double sample : samples_ms)
    sum += sample;
  stats.mean = sum / count;
  // Two passes, like numpy: the mean first, then the squared deviations from it.
  double squared_deviations = 0.0;
  for (double sample : samples_ms)
    squared_deviations += (sample - stats.mean) * (sample - stats.mean);
  stats.std = std::sqrt(squared_deviations / count);
  // np.median averages the two middle values of an even count.
  stats.median = n % 2 == 1 ? samples_ms[n / 2] : (samples_ms[n / 2 - 1] + samples_ms[n / 2]) / 2.0;
  stats.percentile_95 = percentile(samples_ms, 95.0);
  stats.percentile_99 = percentile(samples_ms, 99.0);
  return stats;
}

boost::json::object to_json(const RuntimeStats& stats) {
  return {{"mean", stats.mean},
          {"std", stats.std},
          {"min", stats.min},
          {"max", stats.max},
          {"median", stats.median},
          {"percentile_95", stats.percentile_95},
          {"percentile_99", stats.percentile_99},
          {"count", stats.count}};
}

} // namespace keval::tensor
