#include "iso_time.h"

#include <array>
#include <cstdio>
#include <ctime>

namespace dtrun {

std::string isoTime(std::chrono::system_clock::time_point time) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch());
  const std::time_t seconds = static_cast<std::time_t>(ms.count() / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  std::array<char, 40> buffer{};
  const std::size_t n = std::strftime(buffer.data(), buffer.size(), "%Y-%m-%dT%H:%M:%S", &utc);
  std::array<char, 8> millis{};
  static_cast<void>(
      std::snprintf(millis.data(), millis.size(), ".%03dZ", static_cast<int>(ms.count() % 1000)));
  return std::string(buffer.data(), n) + millis.data();
}

}  // namespace dtrun
