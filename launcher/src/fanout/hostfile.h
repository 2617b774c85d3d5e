// The hosts of `dtrun --hostfile=FILE` and `--hosts=a,b,c`: DeepSpeed's hostfile (`host
// slots=N`), OpenMPI's (`host slots=N max_slots=M`), bare names one per line, `#` comments;
// then --include / --exclude. Pure functions over text (the caller reads the file).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtrun/common.h"

namespace dtrun::launcher {

// One host, as the user wrote it.
struct HostEntry {
  std::string name;             // what ssh is given: "node1", "user@node1", "10.0.0.7"
  std::optional<int> slots;     // slots=N: this host's --nproc_per_node unless that flag is given
  std::optional<int> maxSlots;  // OpenMPI's max_slots: checked against slots, otherwise unused
  int line = 0;                 // its line in the hostfile (1-based); 0 for --hosts
};

// A hostfile's text; `fileName` opens every error ("hosts.txt:3: ..."). At least one host, each
// once; keys slots, max_slots (max-slots); anything else is refused with the fix.
[[nodiscard]] Result<std::vector<HostEntry>> parseHostfile(std::string_view text,
                                                           std::string_view fileName);

// --hosts=a,b,c (mpirun's --host syntax: "a:2" gives a 2 slots).
[[nodiscard]] Result<std::vector<HostEntry>> parseHostList(std::string_view list);

// The hosts left after --include or --exclude (at most one of them), in the hostfile's order.
// Both take DeepSpeed's `host1@host2` or `host1,host2`; per-host GPU indices (`host1:0,1`) are
// refused as not supported yet.
[[nodiscard]] Result<std::vector<HostEntry>> selectHosts(std::vector<HostEntry> hosts,
                                                         const std::optional<std::string>& include,
                                                         const std::optional<std::string>& exclude);

// Where the other hosts reach `name`: without a "user@" in front.
std::string hostAddress(std::string_view name);

}  // namespace dtrun::launcher
