// The fan-out room's interface: starting one agent per host over ssh (its job's data, the
// hostfile it reads, the stdin watch a remote agent keeps on its ssh session). Below the
// launcher's parsing and planning: nothing here includes them.
// The planning and the launch command include this header only; the files it lists are the room's
// own.
#pragma once

#include "fanout/hostfile.h"     // IWYU pragma: export
#include "fanout/ssh_fanout.h"   // IWYU pragma: export
#include "fanout/ssh_job.h"      // IWYU pragma: export
#include "fanout/stdin_watch.h"  // IWYU pragma: export
