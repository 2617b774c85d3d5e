// A stand-in for libnvidia-ml.so.1 on machines without a GPU, for gpu_health_test.sh's gpus
// scenarios and gpus_command_test.sh: dtrun loads it through DTRUN_NVML_LIBRARY and runs its real
// NVML code against it.
//   g++ -shared -fPIC -o libnvidia-ml.so.1 fake_nvml.cpp
// Its GPUs, from the environment of the dtrun that loads it (read at every call):
//   FAKE_NVML_COUNT=N         N GPUs (default 8), named "Fake GPU", UUID GPU-fake-<index>
//   FAKE_NVML_BUSY=G:PID:FILE while FILE exists, GPU G holds 1 GiB of process PID's memory
//   FAKE_NVML_PROCESSES=G:PID:MIB,...  GPU G holds MIB MiB of process PID's memory (after BUSY's)
//   FAKE_NVML_PROCESSES_FILE=F  F holds more entries of that form, each ended by a comma (workers
//                             append their own pid there once they run; a missing F adds none)
//   FAKE_NVML_UTILIZATION=G:GPU:MEM,...  GPU G's utilisation: GPU % and memory % (default 0 0)
//   FAKE_NVML_MEMORY=G:USED:TOTAL,...  GPU G's memory in MiB (default: its processes' sum, of
//                             81559 MiB, an H100's)
//   FAKE_NVML_PENDING=G       GPU G has a row remapping pending (it needs a reset)
// Only what dtrun calls is here, with nvml.h's signatures.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

namespace {
struct Device {
  unsigned index;
};
Device devices[64];

unsigned envUnsigned(const char* name, unsigned fallback) {
  const char* text = std::getenv(name);
  return text != nullptr && *text != '\0' ? static_cast<unsigned>(std::atoi(text)) : fallback;
}

struct Busy {
  int gpu = -1;
  unsigned pid = 0;
  std::string file;
};

// "G:A:B,G:A:B,...": the entries whose first number is `gpu`, as {A, B}.
std::vector<std::pair<unsigned long long, unsigned long long>> entriesIn(const std::string& spec,
                                                                         unsigned gpu) {
  std::vector<std::pair<unsigned long long, unsigned long long>> out;
  std::size_t at = 0;
  while (at <= spec.size()) {
    std::size_t end = spec.find(',', at);
    end = end == std::string::npos ? spec.size() : end;
    unsigned g = 0;
    unsigned long long a = 0;
    unsigned long long b = 0;
    if (std::sscanf(spec.substr(at, end - at).c_str(), "%u:%llu:%llu", &g, &a, &b) == 3 &&
        g == gpu) {
      out.emplace_back(a, b);
    }
    at = end + 1;
  }
  return out;
}

// The environment variable `name`'s entries for `gpu`.
std::vector<std::pair<unsigned long long, unsigned long long>> entries(const char* name,
                                                                       unsigned gpu) {
  const char* text = std::getenv(name);
  return text == nullptr ? std::vector<std::pair<unsigned long long, unsigned long long>>{}
                         : entriesIn(text, gpu);
}

// The file FAKE_NVML_PROCESSES_FILE names, whole; "" when unset or unreadable.
std::string processesFile() {
  const char* path = std::getenv("FAKE_NVML_PROCESSES_FILE");
  std::FILE* f = path == nullptr ? nullptr : std::fopen(path, "r");
  if (f == nullptr) {
    return "";
  }
  std::string text;
  char buf[512];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    text.append(buf, n);
  }
  static_cast<void>(std::fclose(f));
  return text;
}

Busy busy() {
  Busy b;
  const char* text = std::getenv("FAKE_NVML_BUSY");
  if (text == nullptr) {
    return b;
  }
  const std::string spec(text);
  const auto first = spec.find(':');
  const auto second = spec.find(':', first + 1);
  if (first == std::string::npos || second == std::string::npos) {
    return b;
  }
  b.gpu = std::atoi(spec.substr(0, first).c_str());
  b.pid = static_cast<unsigned>(std::atoi(spec.substr(first + 1, second - first - 1).c_str()));
  b.file = spec.substr(second + 1);
  return b;
}

// nvml.h's records, as dtrun reads them.
struct ProcessInfo {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
struct Utilization {
  unsigned int gpu;
  unsigned int memory;
};
struct Memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct MemoryV2 {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};

// GPU `index`'s processes: BUSY's while its file exists, then PROCESSES' entries, then the file's.
std::vector<ProcessInfo> processesOf(unsigned index) {
  std::vector<ProcessInfo> out;
  const Busy b = busy();
  if (b.gpu == static_cast<int>(index) && ::access(b.file.c_str(), F_OK) == 0) {
    out.push_back({b.pid, 1ULL << 30, 0, 0});
  }
  for (const auto& [pid, mib] : entries("FAKE_NVML_PROCESSES", index)) {
    out.push_back({static_cast<unsigned>(pid), mib << 20, 0, 0});
  }
  for (const auto& [pid, mib] : entriesIn(processesFile(), index)) {
    out.push_back({static_cast<unsigned>(pid), mib << 20, 0, 0});
  }
  return out;
}

Memory memoryOf(unsigned index) {
  const auto set = entries("FAKE_NVML_MEMORY", index);
  Memory m{81559ULL << 20, 0, 0};
  if (!set.empty()) {
    m.used = set.front().first << 20;
    m.total = set.front().second << 20;
  } else {
    for (const ProcessInfo& p : processesOf(index)) {
      m.used += p.usedGpuMemory;
    }
  }
  m.free = m.total > m.used ? m.total - m.used : 0;
  return m;
}

}  // namespace

extern "C" {

int nvmlInit_v2() { return 0; }
int nvmlShutdown() { return 0; }
const char* nvmlErrorString(int rc) { return rc == 7 ? "Insufficient Size" : "Fake NVML error"; }

int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = envUnsigned("FAKE_NVML_COUNT", 8);
  return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, Device** device) {
  if (index >= envUnsigned("FAKE_NVML_COUNT", 8) || index >= 64) {
    return 2;  // NVML_ERROR_INVALID_ARGUMENT
  }
  devices[index].index = index;
  *device = &devices[index];
  return 0;
}

int nvmlDeviceGetComputeRunningProcesses_v3(Device* device, unsigned* count, ProcessInfo* infos) {
  const std::vector<ProcessInfo> held = processesOf(device->index);
  if (*count < held.size()) {
    *count = static_cast<unsigned>(held.size());
    return 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  }
  *count = static_cast<unsigned>(held.size());
  for (std::size_t i = 0; i < held.size(); ++i) {
    infos[i] = held[i];
  }
  return 0;
}

int nvmlDeviceGetUtilizationRates(Device* device, Utilization* utilization) {
  const auto set = entries("FAKE_NVML_UTILIZATION", device->index);
  utilization->gpu = set.empty() ? 0 : static_cast<unsigned>(set.front().first);
  utilization->memory = set.empty() ? 0 : static_cast<unsigned>(set.front().second);
  return 0;
}

int nvmlDeviceGetMemoryInfo(Device* device, Memory* memory) {
  *memory = memoryOf(device->index);
  return 0;
}

int nvmlDeviceGetMemoryInfo_v2(Device* device, MemoryV2* memory) {
  if (memory->version != (static_cast<unsigned>(sizeof(MemoryV2)) | (2U << 24U))) {
    return 25;  // NVML_ERROR_ARGUMENT_VERSION_MISMATCH
  }
  const Memory m = memoryOf(device->index);
  memory->total = m.total;
  memory->reserved = 0;
  memory->free = m.free;
  memory->used = m.used;
  return 0;
}

int nvmlDeviceGetName(Device* /*device*/, char* name, unsigned length) {
  std::snprintf(name, length, "Fake GPU");
  return 0;
}

int nvmlDeviceGetUUID(Device* device, char* uuid, unsigned length) {
  std::snprintf(uuid, length, "GPU-fake-%u", device->index);
  return 0;
}

int nvmlDeviceGetRemappedRows(Device* device, unsigned* corrected, unsigned* uncorrected,
                              unsigned* pending, unsigned* failed) {
  *corrected = *uncorrected = *failed = 0;
  *pending =
      static_cast<int>(device->index) == static_cast<int>(envUnsigned("FAKE_NVML_PENDING", 1000))
          ? 1
          : 0;
  return 0;
}

int nvmlDeviceGetRetiredPagesPendingStatus(Device* /*device*/, int* pending) {
  *pending = 0;
  return 0;
}
}
