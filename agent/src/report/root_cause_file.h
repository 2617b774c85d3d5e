// dtrun's own TORCHELASTIC_ERROR_FILE: what torchrun's @record leaves there for the scheduler or
// launcher above it when the job fails (torch.distributed.elastic.multiprocessing.errors:
// ErrorHandler.dump_error_file for a ChildFailedError). Pure, file reads and the write aside.
#pragma once

#include <optional>
#include <string>

#include "report/failure_report.h"

namespace dtrun::agent::detail {

// The error file's JSON for the job's root cause, on `host` unless the failure names its own.
// `childError` is the text of the failed worker's own error file, when it wrote one: copied, with
// message.errorCode set to the worker's exit code (minus the signal number when signalled) as
// torch does; a legacy string message is copied as it is. Without one (or when it is not JSON
// with a "message"), ErrorHandler's format: {"message": {"message": "rank R (local_rank L) on H
// failed: exit code C", "extraInfo": {"py_callstack": <what the report shows>, "timestamp":
// "<epoch seconds>"}, "errorCode": C}}.
std::string rootCauseErrorJson(const WorkerFailure& root, const std::string& host,
                               const std::optional<std::string>& childError);

// Writes rootCauseErrorJson to `path`, replacing what was there (torch logs and overwrites an
// existing file too); the worker's error file is read from root.errorFile when it names one. A
// failure to write is logged, never fatal: the job's exit code still tells the story.
void writeRootCauseErrorFile(const std::string& path, const WorkerFailure& root,
                             const std::string& host);

// The error file's JSON when a signal stopped dtrun itself (pid `pid`), as torchrun's @record
// writes it for the SignalException its agent raises: {"message": {"message": "SignalException:
// Process <pid> got signal: <n>", "extraInfo": {"py_callstack": ..., "timestamp": ...}}}.
std::string signalErrorJson(int pid, int signal);

// Writes `json` to `path`; a failure is logged, never fatal.
void writeErrorFile(const std::string& path, const std::string& json);

}  // namespace dtrun::agent::detail
