// PLACEHOLDER while the error handlers are being written.
#include "error_handlers.h"

namespace dtrun::runtime::detail {
void installErrorHandlers() {}
}  // namespace dtrun::runtime::detail
