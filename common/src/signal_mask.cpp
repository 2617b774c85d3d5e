#include "signal_mask.h"

#include <pthread.h>

namespace dtrun::signals {

sigset_t block(const std::vector<int>& signals) {
  sigset_t set;
  sigemptyset(&set);
  for (const int sig : signals) {
    sigaddset(&set, sig);
  }
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

sigset_t block(std::initializer_list<int> signals) { return block(std::vector<int>(signals)); }

}  // namespace dtrun::signals
