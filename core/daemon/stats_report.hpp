// Rendering a StatsSnapshot: JSON for GET /stats, Prometheus text exposition (version 0.0.4)
// for GET /metrics.
#pragma once

#include "daemon/job_stats.hpp"

#include <string>

#include <boost/json/object.hpp>

namespace keval::daemon {

boost::json::object stats_json(const StatsSnapshot& stats);
std::string prometheus_text(const StatsSnapshot& stats);

} // namespace keval::daemon
