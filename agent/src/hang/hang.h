// The hang room's interface: the hang watch (progress, diagnosis, stack dumps) and the failure a
// hang stands for.
// Other rooms and the wiring include this header only; the files it lists are the room's own.
#pragma once

#include "hang/hang_watch.h"  // IWYU pragma: export
