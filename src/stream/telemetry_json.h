#pragma once
// The cache telemetry as a JSON object, for --stats json and the server's metrics.
#include <nlohmann/json.hpp>

#include "stream/cache_telemetry.h"

namespace df::stream {

nlohmann::json telemetry_json(const TelemetrySnapshot& s);

}  // namespace df::stream
