#pragma once
// The host CPU as sessions and benchmark results name it.
#include <string>

namespace specula {

// /proc/cpuinfo's "model name" ("AMD EPYC 9R14 96-Core Processor"), "unknown" without one.
std::string cpu_model_name();

}  // namespace specula
