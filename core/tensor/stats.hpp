// Runtime statistics over timing samples, matching the seed's numpy computation.
#pragma once

#include <cstdint>
#include <vector>

#include <boost/json/object.hpp>

namespace keval::tensor {

struct RuntimeStats {
  double mean = 0.0;
  double std = 0.0; // population standard deviation, numpy's np.std default (ddof = 0)
  double min = 0.0;
  double max = 0.0;
  double median = 0.0;
  double percentile_95 = 0.0; // numpy's default "linear" interpolation
  double percentile_99 = 0.0;
  int64_t count = 0;
};

// Samples in milliseconds. Throws std::invalid_argument when `samples_ms` is empty or holds a
// non-finite value (a broken timer, never a real duration).
RuntimeStats compute_stats(std::vector<double> samples_ms);

// Exactly the keys mean, std, min, max, median, percentile_95, percentile_99, count.
boost::json::object to_json(const RuntimeStats& stats);

} // namespace keval::tensor
