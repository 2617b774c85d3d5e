// The job room's interface: the job's set-up and store link, its rounds' coordinator, the run
// directory, the signal feed, the process's facts, and the policy after an attempt.
// Other rooms and the wiring include this header only; the files it lists are the room's own.
#pragma once

#include "job/attempt_policy.h"    // IWYU pragma: export
#include "job/attempt_progress.h"  // IWYU pragma: export
#include "job/job_coordinator.h"   // IWYU pragma: export
#include "job/job_setup.h"         // IWYU pragma: export
#include "job/process_facts.h"     // IWYU pragma: export
#include "job/run_dir.h"           // IWYU pragma: export
#include "job/signal_feed.h"       // IWYU pragma: export
