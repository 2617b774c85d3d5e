// The console room's interface: console lines, the non-blocking console, --console=collapse and its
// relay across nodes.
// Other rooms and the wiring include this header only; the files it lists are the room's own.
#pragma once

#include "console/collapsed_console.h"  // IWYU pragma: export
#include "console/console_lines.h"      // IWYU pragma: export
#include "console/console_out.h"        // IWYU pragma: export
#include "console/console_relay.h"      // IWYU pragma: export
