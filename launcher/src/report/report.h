// The report room's interface: a run report rendered as one self-contained HTML page (`dtrun
// report`), which the live status page reuses; a run directory packed into one archive (`dtrun
// bundle`); `dtrun gpus` (gpus_command.cpp, over dtrun/gpu_readings.h). It includes nothing of
// the launcher's parsing.
// Other launcher files include this header only; the files it lists are the room's own.
#pragma once

#include "report/report_html.h"  // IWYU pragma: export
#include "report/run_bundle.h"   // IWYU pragma: export
#include "report/tar_archive.h"  // IWYU pragma: export
