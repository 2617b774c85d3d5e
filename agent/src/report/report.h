// The report room's interface: the run record (attempt log, run report), the failure report, the
// job's one report across nodes, the root-cause error file, the run's record in its directory.
// Other rooms and the wiring include this header only; the files it lists are the room's own.
#pragma once

#include "report/attempt_log.h"      // IWYU pragma: export
#include "report/failure_report.h"   // IWYU pragma: export
#include "report/job_report.h"       // IWYU pragma: export
#include "report/root_cause_file.h"  // IWYU pragma: export
#include "report/run_facts.h"        // IWYU pragma: export
#include "report/run_report.h"       // IWYU pragma: export
