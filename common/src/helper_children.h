// Helper processes dtrun forks for itself (the worker guardian, the stdin watcher): children of
// the agent that are not workers and are never to be taken for what a worker left behind.
// Thread-safe.
#pragma once

#include <sys/types.h>

namespace dtrun {

void registerHelperChild(pid_t pid);
void forgetHelperChild(pid_t pid);
bool isHelperChild(pid_t pid);

}  // namespace dtrun
