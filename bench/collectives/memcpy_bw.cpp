// memcpy_bw: this machine's memory-copy bandwidth on one core, the physical limit of a collective
// between ranks of one host (every byte a shared-memory transport moves is copied at least once).
// bench/collectives/run.sh runs it in the same run as the collectives and report.py states each
// collective's bandwidth as a fraction of it.
//
//   memcpy_bw [--bytes N] [--repeats R]
//   -> "memcpy bytes=N GBps=<median over R copies of N bytes>"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  std::size_t bytes = std::size_t{64} << 20;
  int repeats = 21;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--bytes") {
      bytes = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (flag == "--repeats") {
      repeats = std::atoi(argv[i + 1]);
    } else {
      (void)std::fprintf(
          stderr, "memcpy_bw: unknown flag %s (usage: memcpy_bw [--bytes N] [--repeats R])\n",
          argv[i]);
      return 2;
    }
  }
  if (bytes == 0 || repeats < 1) {
    (void)std::fprintf(stderr, "memcpy_bw: --bytes and --repeats must be positive\n");
    return 2;
  }
  // Touched first: page faults are not copies.
  std::vector<char> from(bytes, 1);
  std::vector<char> to(bytes, 0);
  std::vector<double> rates;
  for (int r = 0; r < repeats + 1; ++r) {
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(to.data(), from.data(), bytes);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    from[static_cast<std::size_t>(r) % bytes] = static_cast<char>(to[bytes - 1] + 1);
    if (r > 0) {  // the first warms the caches and the TLB
      rates.push_back(static_cast<double>(bytes) / seconds / 1e9);
    }
  }
  std::sort(rates.begin(), rates.end());
  std::printf("memcpy bytes=%zu GBps=%.3f\n", bytes, rates[rates.size() / 2]);
  return 0;
}
