// Placement options (--gpus, --gpus_per_worker, --workers_per_gpu, --virtual-local-rank,
// --numa-binding, --cpu_binding) to each local rank's placement, through dtrun::placement on the
// topology HostFacts reads (only when one of them is given: a plain launch reads no sysfs).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dtrun/common.h"

#include "launch_model.h"
#include "resolver.h"

namespace dtrun::launcher {

// The GPUs --nproc_per_node=gpu counts: --gpus when given, else CUDA_VISIBLE_DEVICES (as torch
// counts it), else SLURM_STEP_GPUS or SLURM_JOB_GPUS, else the visible device nodes.
[[nodiscard]] Result<int> usableGpuCount(const Resolver& options, const HostFacts& host);

// Fills plan.config.placement (empty when no placement option is given) and plan.placement,
// the banner's account of it.
[[nodiscard]] Status resolvePlacement(const Resolver& options, const HostFacts& host,
                                      bool virtualLocalRank, LaunchPlan& plan);

}  // namespace dtrun::launcher
