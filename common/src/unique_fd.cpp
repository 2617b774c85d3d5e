#include <unistd.h>

#include "dtrun/common.h"

namespace dtrun {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) {
    // close() errors cannot be acted on here; EINTR still releases the descriptor on Linux.
    static_cast<void>(::close(fd_));
  }
  fd_ = fd;
}

}  // namespace dtrun
