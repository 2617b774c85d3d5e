// The live room's interface: the status endpoint (--status_port) and what it shows of a running
// job. The top room: it reads the workers room below it; nothing includes it but the wiring.
// Other rooms and the wiring include this header only; the files it lists are the room's own.
#pragma once

#include "live/live_exchange.h"       // IWYU pragma: export
#include "live/live_view.h"           // IWYU pragma: export
#include "live/metrics_text.h"        // IWYU pragma: export
#include "live/node_status.h"         // IWYU pragma: export
#include "live/stack_groups.h"        // IWYU pragma: export
#include "live/stack_request.h"       // IWYU pragma: export
#include "live/straggler_detector.h"  // IWYU pragma: export
