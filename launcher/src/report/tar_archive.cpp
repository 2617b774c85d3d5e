#include "report/tar_archive.h"

#include <array>
#include <cstdio>
#include <utility>

namespace dtrun::launcher {
namespace {

constexpr std::size_t kBlock = 512;
constexpr std::size_t kNameField = 100;
constexpr std::size_t kPrefixField = 155;

// `value` in octal, zero-padded to width - 1 digits and a NUL: the numeric fields of ustar.
void putOctal(std::string& header, std::size_t offset, std::size_t width,
              unsigned long long value) {
  std::array<char, 24> digits{};
  static_cast<void>(
      std::snprintf(digits.data(), digits.size(), "%0*llo", static_cast<int>(width - 1), value));
  header.replace(offset, width - 1, digits.data(), width - 1);
}

// ustar keeps a long name as prefix + "/" + name: split at the last '/' that fits both fields.
Result<std::pair<std::string, std::string>> splitName(const std::string& path) {
  if (path.empty() || path.front() == '/' || path == ".." || path.starts_with("../") ||
      path.find("/../") != std::string::npos || path.ends_with("/..")) {
    return Status::invalidArgument("archive entry '" + path + "': expected a relative path");
  }
  if (path.size() <= kNameField) {
    return std::pair<std::string, std::string>{"", path};
  }
  for (std::size_t slash = path.rfind('/'); slash != std::string::npos && slash > 0;
       slash = path.rfind('/', slash - 1)) {
    if (slash <= kPrefixField && path.size() - slash - 1 <= kNameField) {
      return std::pair<std::string, std::string>{path.substr(0, slash), path.substr(slash + 1)};
    }
  }
  return Status::invalidArgument("archive entry '" + path +
                                 "': too long for a tar name (255 bytes, 100 after a '/')");
}

}  // namespace

Result<std::string> tarArchive(const std::vector<ArchiveFile>& files, std::time_t mtime) {
  std::string out;
  for (const ArchiveFile& f : files) {
    DTRUN_ASSIGN_OR_RETURN(const auto names, splitName(f.name));
    std::string header(kBlock, '\0');
    header.replace(0, names.second.size(), names.second);
    putOctal(header, 100, 8, 0644);                                     // mode
    putOctal(header, 108, 8, 0);                                        // uid
    putOctal(header, 116, 8, 0);                                        // gid
    putOctal(header, 124, 12, f.content.size());                        // size
    putOctal(header, 136, 12, static_cast<unsigned long long>(mtime));  // mtime
    header[156] = '0';                                                  // a regular file
    header.replace(257, 6, std::string("ustar\0", 6));
    header.replace(263, 2, "00");
    header.replace(345, names.first.size(), names.first);
    // The checksum: the header's bytes summed with its own field read as 8 spaces.
    header.replace(148, 8, 8, ' ');
    unsigned long long sum = 0;
    for (const char c : header) {
      sum += static_cast<unsigned char>(c);
    }
    putOctal(header, 148, 7, sum);  // six digits, a NUL, a space
    header[154] = '\0';
    out += header;
    out += f.content;
    out.append((kBlock - f.content.size() % kBlock) % kBlock, '\0');
  }
  out.append(2 * kBlock, '\0');
  return out;
}

}  // namespace dtrun::launcher
