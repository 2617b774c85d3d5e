// tarArchive (`dtrun bundle`'s archive): what Debian's tar reads back is what went in, long names
// included; names ustar cannot hold are refused, naming them.
#include "report/tar_archive.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "support/scoped.h"

namespace {

using dtrun::launcher::ArchiveFile;
using dtrun::launcher::tarArchive;
using dtrun::testing::TempDir;

std::string readAll(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("tar reads back every file of the archive, with long names and empty files",
          "[launcher][bundle]") {
  const TempDir dir;
  const std::string deep = "b/" + std::string(90, 'd') + "/" + std::string(95, 'f');  // > 100
  std::string binary(1500, '\0');
  for (std::size_t i = 0; i < binary.size(); ++i) {
    binary[i] = static_cast<char>(i * 7);
  }
  const std::vector<ArchiveFile> files = {{"b/MANIFEST.txt", "hello\n"},
                                          {"b/empty", ""},
                                          {deep, binary},
                                          {"b/x/512", std::string(512, 'z')}};
  auto archive = tarArchive(files, 1700000000);
  REQUIRE(archive.isOk());
  CHECK(archive.value().size() % 512 == 0);
  {
    std::ofstream out(dir.path() / "a.tar", std::ios::binary);
    out << archive.value();
  }
  const std::string command = "tar -xf " + (dir.path() / "a.tar").string() + " -C " +
                              dir.path().string() + " 2>" + (dir.path() / "err").string();
  REQUIRE(std::system(command.c_str()) == 0);  // NOLINT(cert-env33-c): Debian's own tar
  CHECK(readAll(dir.path() / "err").empty());
  for (const ArchiveFile& f : files) {
    CAPTURE(f.name);
    CHECK(readAll(dir.path() / f.name) == f.content);
  }
}

TEST_CASE("a name ustar cannot hold, or not relative, is refused with the name",
          "[launcher][bundle]") {
  for (const std::string& name :
       {std::string(101, 'n'), std::string(160, 'p') + "/" + std::string(10, 'n'),
        "b/" + std::string(101, 'n'), std::string("/etc/passwd"), std::string("a/../b"),
        std::string("")}) {
    CAPTURE(name);
    auto archive = tarArchive({{name, "x"}}, 0);
    REQUIRE_FALSE(archive.isOk());
    CHECK(archive.status().message().find("archive entry '" + name + "'") != std::string::npos);
  }
}
