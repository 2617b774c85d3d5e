// progress_bench: nanoseconds per begin+end pair of ProgressWriter (what every libdtrt
// collective adds) with 1 and 2 writing threads, and per ProgressReader::read (what the agent's
// hang check costs per rank). Usage: progress_bench [iterations] (default 2,000,000).
#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "progress_file.h"

namespace {

using Clock = std::chrono::steady_clock;

double nsPer(Clock::duration elapsed, long count) {
  return static_cast<double>(
             std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count()) /
         static_cast<double>(count);
}

}  // namespace

int main(int argc, char** argv) {
  const long iterations = argc > 1 ? std::atol(argv[1]) : 2000000;
  std::string path = "/tmp/dtrun-progress-bench-XXXXXX";
  const int fd = ::mkstemp(path.data());
  if (fd < 0 || iterations <= 0) {
    std::cerr << "progress_bench: cannot create " << path << ", or iterations <= 0\n";
    return 1;
  }
  ::close(fd);
  if (!dtrun::progress::createProgressFile(path, 1)) {
    std::cerr << "progress_bench: cannot write " << path << "\n";
    return 1;
  }
  auto writer = dtrun::progress::ProgressWriter::open(path, 0);
  auto reader = dtrun::progress::ProgressReader::open(path, 0);
  if (!writer || !reader) {
    std::cerr << "progress_bench: cannot map " << path << "\n";
    return 1;
  }
  const std::string group = "dtrt/tcp/world";
  for (const int threads : {1, 2}) {
    const auto start = Clock::now();
    std::vector<std::thread> pool;
    pool.reserve(static_cast<std::size_t>(threads));
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&] {
        for (long i = 0; i < iterations / threads; ++i) {
          writer->begin("all_reduce", group, 4096);
          writer->end();
        }
      });
    }
    for (auto& thread : pool) {
      thread.join();
    }
    std::cout << std::fixed << std::setprecision(1) << "begin+end, " << threads
              << " thread(s): " << nsPer(Clock::now() - start, iterations) << " ns per operation\n";
  }
  const auto start = Clock::now();
  std::uint64_t seen = 0;
  for (long i = 0; i < iterations; ++i) {
    seen += reader->read()->ops;
  }
  std::cout << "read (no writer running): " << nsPer(Clock::now() - start, iterations)
            << " ns per snapshot (ops " << seen / static_cast<std::uint64_t>(iterations) << ")\n";
  ::unlink(path.c_str());
  return 0;
}
