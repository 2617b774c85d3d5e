// Everything the launcher's tests and fuzz target drive, in one include. Where each part lives:
//   launch_model.h           RawOptions, HostFacts, LaunchPlan: the data the parts pass on
//   option_table.{h,cpp}     the option table and the CLI11 glue
//   value_parsers.{h,cpp}    one option's text -> a value, or a one-line error
//   resolver.h               command line > PET_* > the scheduler's allocation > default
//   scheduler_merge.{h,cpp}  the SLURM/PBS allocation merged below the user's settings
//   launch_plan.{h,cpp}      validate(): everything above -> LaunchPlan, pure
//   *_options.{h,cpp}        validate()'s parts, each named for what it checks (rendezvous,
//                            stop, restart, log, insight, health, placement, etcd)
//   host_facts.{h,cpp}       readHostFacts(): the launcher's only system calls
//   plan_text.{h,cpp}        the banner and --dry-run's text
//   launch_command.cpp       dtrun/launcher.h's LaunchCommand: plan, signals, logging, the agent
//   store_command.cpp        `dtrun store`
//   cli_docs.{h,cpp}         the man page's OPTIONS and COMMANDS and the bash completion, from
//                            the app (`dtrun --print-man`, `dtrun completion bash`)
//   fanout/                  the launch over ssh run, the hostfile, --watch_stdin (below all this)
//   report/                  `dtrun report`'s HTML page (below all this)
#pragma once

#include "dtrun/launcher.h"

#include "host_facts.h"
#include "launch_model.h"
#include "launch_plan.h"
#include "option_table.h"
#include "plan_text.h"
#include "value_parsers.h"
