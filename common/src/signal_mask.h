// The one way dtrun's programs take signals: blocked in every thread and read synchronously
// (a signalfd in the agent, sigwait in `dtrun store`), so no handler ever runs in signal context.
// Internal to dtrun.
#pragma once

#include <initializer_list>
#include <vector>

#include <signal.h>

namespace dtrun::signals {

// Blocks `signals` in the calling thread and returns them as a set. Call it before the first
// thread starts: threads inherit the mask, and a signal unblocked in any thread could be
// delivered there instead.
sigset_t block(const std::vector<int>& signals);
sigset_t block(std::initializer_list<int> signals);

}  // namespace dtrun::signals
