// `dtrun report FILE --html OUT`: a run report (docs/report.schema.json) as one self-contained
// HTML page: a summary, an inline SVG timeline with a row per rank (each attempt a bar coloured
// by how the rank ended, restarts as dashed lines, the hang's detection as a marker, the root
// cause's text beside its rank) and a table of the attempts. No script, no external file: it
// opens from a cluster's shared disk in any browser. Pure: text in, text out.
#pragma once

#include <string>
#include <string_view>

#include "dtrun/common.h"

namespace dtrun::launcher {

// The page, or kInvalidArgument with one line naming what the report lacks.
Result<std::string> reportHtml(std::string_view reportJson);

}  // namespace dtrun::launcher
