// A stand-in for libnvidia-ml.so.1 on machines without a GPU, for health_checks_test.sh's gpus
// scenarios: dtrun loads it through DTRUN_NVML_LIBRARY and runs its real NVML code against it.
//   g++ -shared -fPIC -o libnvidia-ml.so.1 fake_nvml.cpp
// Its GPUs, from the environment dtrun's agent inherits:
//   FAKE_NVML_COUNT=N         N GPUs (default 8)
//   FAKE_NVML_BUSY=G:PID:FILE while FILE exists, GPU G holds 1 GiB of process PID's memory
//   FAKE_NVML_PENDING=G       GPU G has a row remapping pending (it needs a reset)
// Only what dtrun calls is here, with nvml.h's signatures.
#include <cstdlib>
#include <cstring>
#include <string>

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
}  // namespace

extern "C" {
struct ProcessInfo {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

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
  const Busy b = busy();
  const bool held = b.gpu == static_cast<int>(device->index) && ::access(b.file.c_str(), F_OK) == 0;
  if (!held) {
    *count = 0;
    return 0;
  }
  if (*count < 1) {
    *count = 1;
    return 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  }
  *count = 1;
  std::memset(infos, 0, sizeof *infos);
  infos[0].pid = b.pid;
  infos[0].usedGpuMemory = 1ULL << 30;
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
