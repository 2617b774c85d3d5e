#include "helper_children.h"

#include <mutex>
#include <set>

namespace dtrun {
namespace {

std::mutex helpersMutex;
std::set<pid_t> helpers;  // guarded by helpersMutex

}  // namespace

void registerHelperChild(pid_t pid) {
  const std::lock_guard lock(helpersMutex);
  helpers.insert(pid);
}

void forgetHelperChild(pid_t pid) {
  const std::lock_guard lock(helpersMutex);
  helpers.erase(pid);
}

bool isHelperChild(pid_t pid) {
  const std::lock_guard lock(helpersMutex);
  return helpers.count(pid) != 0;
}

}  // namespace dtrun
