#include "report/job_report.h"

#include <algorithm>

namespace dtrun::agent::detail {
namespace {

std::string slotsKey(const std::string& runId) { return "dtrun/" + runId + "/reports/slots"; }
std::string reportKey(const std::string& runId, std::int64_t slot) {
  return "dtrun/" + runId + "/reports/" + std::to_string(slot);
}

}  // namespace

Status sendNodeReport(const rdzv::StoreFactory& stores, const std::string& runId,
                      const std::string& report) {
  DTRUN_ASSIGN_OR_RETURN(auto client, stores());
  DTRUN_ASSIGN_OR_RETURN(const std::int64_t slot, client->takeTicket(slotsKey(runId)));
  return client->set(reportKey(runId, slot), report);
}

Result<std::vector<std::string>> gatherNodeReports(const rdzv::StoreFactory& stores,
                                                   const std::string& runId) {
  DTRUN_ASSIGN_OR_RETURN(auto client, stores());
  DTRUN_ASSIGN_OR_RETURN(const std::int64_t slots, client->ticketsTaken(slotsKey(runId)));
  std::vector<std::string> reports;
  for (std::int64_t slot = 1; slot <= slots; ++slot) {
    // A node that died between taking its slot and filling it left nothing there.
    DTRUN_ASSIGN_OR_RETURN(auto report, client->tryGet(reportKey(runId, slot)));
    if (report) {
      reports.push_back(std::move(*report));
    }
  }
  return reports;
}

}  // namespace dtrun::agent::detail
