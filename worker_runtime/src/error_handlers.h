// Turns a worker's death into a readable failure report: on an uncaught exception or a fatal
// signal, TORCHELASTIC_ERROR_FILE gets torchrun's JSON ({"message": {"message", "extraInfo":
// {"py_callstack", "timestamp"}}}), which dtrun's (and torchrun's) agent quotes.
#pragma once

namespace dtrun::runtime::detail {

// Idempotent. Installs a std::terminate handler and handlers for SIGSEGV, SIGBUS, SIGFPE,
// SIGILL and SIGABRT that write the error file, then let the process die as it would have.
void installErrorHandlers();

}  // namespace dtrun::runtime::detail
