// The health room's interface: the checks before a round and the gate that runs them, the network
// check included; NVML's readings of every GPU, each process named by its rank (gpu_readings.h).
// Other rooms and the wiring include this header only; the files it lists are the room's own.
#pragma once

#include "health/gpu_readings.h"   // IWYU pragma: export
#include "health/health_checks.h"  // IWYU pragma: export
#include "health/health_gate.h"    // IWYU pragma: export
