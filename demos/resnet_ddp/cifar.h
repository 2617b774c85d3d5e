// resnet_ddp's data: CIFAR-10's binary files (data_batch_1..5.bin, test_batch.bin: records of 1
// label byte + 3072 pixel bytes, R, G, B planes of 32x32), read whole into uint8 tensors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace resnet_ddp {

inline constexpr std::int64_t kRecordBytes = 3073;

struct Dataset {
  torch::Tensor images;  // uint8 [n, 3, 32, 32]
  torch::Tensor labels;  // int64 [n]
  [[nodiscard]] std::int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

// Appends the records of one CIFAR-10 binary file; throws on a malformed file.
inline void readCifarFile(const std::filesystem::path& path, std::vector<std::uint8_t>& pixels,
                          std::vector<std::int64_t>& labels) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error("cannot open " + path.string());
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  const auto size = static_cast<std::int64_t>(bytes.size());
  if (size == 0 || size % kRecordBytes != 0) {
    throw std::runtime_error(path.string() + ": " + std::to_string(size) +
                             " bytes is not a multiple of the 3073-byte CIFAR-10 record");
  }
  for (std::int64_t off = 0; off < size; off += kRecordBytes) {
    const auto label = static_cast<std::uint8_t>(bytes[static_cast<std::size_t>(off)]);
    if (label > 9) {
      throw std::runtime_error(path.string() + ": label " + std::to_string(label) + " at record " +
                               std::to_string(off / kRecordBytes) + " (not 0-9)");
    }
    labels.push_back(label);
    pixels.insert(pixels.end(), bytes.begin() + off + 1, bytes.begin() + off + kRecordBytes);
  }
}

inline Dataset loadCifar(const std::filesystem::path& dir, bool train) {
  std::vector<std::filesystem::path> files;
  if (train) {
    for (int i = 1; i <= 5; ++i) {
      const auto p = dir / ("data_batch_" + std::to_string(i) + ".bin");
      if (std::filesystem::exists(p)) {
        files.push_back(p);
      }
    }
  } else if (std::filesystem::exists(dir / "test_batch.bin")) {
    files.push_back(dir / "test_batch.bin");
  }
  if (files.empty()) {
    throw std::runtime_error(
        "no CIFAR-10 " + std::string(train ? "data_batch_*.bin" : "test_batch.bin") + " in " +
        dir.string() + " (binary version; or scripts/make-cifar10-sample DIR)");
  }
  std::vector<std::uint8_t> pixels;
  std::vector<std::int64_t> labels;
  for (const auto& f : files) {
    readCifarFile(f, pixels, labels);
  }
  const auto n = static_cast<std::int64_t>(labels.size());
  Dataset d;
  d.images = torch::from_blob(pixels.data(), {n, 3, 32, 32}, torch::kUInt8).clone();
  d.labels = torch::from_blob(labels.data(), {n}, torch::kLong).clone();
  return d;
}

}  // namespace resnet_ddp
