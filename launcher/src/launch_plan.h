// validate(): what the command line said and what the host is, checked and resolved into the
// launch plan. Pure: everything it learns comes in HostFacts.
#pragma once

#include "dtrun/common.h"

#include "launch_model.h"

namespace dtrun::launcher {

// Checks the options, resolves command line > PET_<DEST> > the batch scheduler's allocation
// (--scheduler) > torchrun's default, resolves the program to the file exec'd, and builds the
// plan. An error's message is one line naming the flag (or environment variable) and what was
// expected, without the "dtrun: " prefix; Errc::kNotFound when the program cannot be found.
[[nodiscard]] Result<LaunchPlan> validate(const RawOptions& raw, const HostFacts& host);

}  // namespace dtrun::launcher
