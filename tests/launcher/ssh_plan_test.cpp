// `dtrun --hostfile/--hosts`: each host's ssh command line, built from the parsed options (what
// reaches the remote dtrun, the environment, the store), and the launches refused before ssh.
#include "ssh_plan.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "plan_support.h"

namespace {

namespace launcher = dtrun::launcher;

launcher::SshFacts sshFacts() {
  return launcher::SshFacts{"/home/u/job", "/opt/dtrun/bin/dtrun", "/usr/bin/ssh"};
}

launcher::HostFacts hostWithFiles() {
  launcher::HostFacts host = dtrun::testing::testHost();
  host.env = {{"PYTHONPATH", "/src"}, {"PATH", "/launcher/bin:/usr/bin"},
              {"NCCL_DEBUG", "INFO"}, {"PET_MAX_RESTARTS", "2"},
              {"HOME", "/home/u"},    {"DATA", "/data set"}};
  host.readFile = [](const std::string& path) -> std::optional<std::string> {
    if (path == "hosts.txt") {
      return "node1 slots=2\nnode2 slots=1\nnode3\n";
    }
    return std::nullopt;
  };
  return host;
}

dtrun::Result<launcher::SshPlan> sshPlan(const std::vector<std::string>& args,
                                         const launcher::HostFacts& host = hostWithFiles()) {
  CLI::App app{"dtrun"};
  launcher::RawOptions raw;
  launcher::addLaunchOptions(app, raw);
  const dtrun::testing::Argv argv("dtrun", args);
  app.parse(launcher::argumentsForParse(argv.argc(), argv.argv()));
  raw.program = app.remaining();
  REQUIRE(launcher::wantsSsh(raw));
  return launcher::planSsh(raw, host, sshFacts());
}

launcher::SshPlan sshPlanOk(const std::vector<std::string>& args) {
  auto plan = sshPlan(args);
  INFO(plan.status().message());
  REQUIRE(plan.isOk());
  return std::move(plan).value();
}

std::string refusal(const std::vector<std::string>& args) {
  const auto plan = sshPlan(args);
  REQUIRE_FALSE(plan.isOk());
  return plan.status().message();
}

}  // namespace

TEST_CASE("one ssh per host: node rank by order, c10d on the first host, slots as nproc",
          "[unit]") {
  const auto plan = sshPlanOk({"--hostfile=hosts.txt", "--rdzv_id=job7", "--tee=3",
                               "--max_restarts=1", "--no_python", "./train", "--lr", "0.1 x"});
  REQUIRE(plan.nodes.size() == 3);
  CHECK(plan.rdzvId == "job7");
  const int port = launcher::rdzvPortFor("job7");
  CHECK(port >= 20000);
  CHECK(port < 30000);
  CHECK(plan.rdzvEndpoint == "node1:" + std::to_string(port));
  CHECK(plan.shutdownTimeout == std::chrono::seconds(30));

  const std::string common = " --rdzv_backend=c10d --rdzv_endpoint=node1:" + std::to_string(port) +
                             " --rdzv_id=job7 --scheduler=none";
  const std::string env =
      "cd -- /home/u/job && exec env NCCL_DEBUG=INFO PET_MAX_RESTARTS=2 "
      "PYTHONPATH=/src /opt/dtrun/bin/dtrun --watch_stdin --nnodes=3 ";
  const std::string tail = " --max_restarts=1 --no_python --tee=3 -- ./train --lr '0.1 x'";
  CHECK(plan.nodes[0].host == "node1");
  CHECK(plan.nodes[0].nodeRank == 0);
  CHECK(plan.nodes[0].remoteCommand ==
        env + "--node_rank=0" + common + " --rdzv_conf=is_host=true --nproc_per_node=2" + tail);
  CHECK(plan.nodes[1].remoteCommand ==
        env + "--node_rank=1" + common + " --rdzv_conf=is_host=false --nproc_per_node=1" + tail);
  CHECK(plan.nodes[2].remoteCommand ==
        env + "--node_rank=2" + common + " --rdzv_conf=is_host=false" + tail);
  CHECK(plan.nodes[2].argv == std::vector<std::string>{"/usr/bin/ssh", "-T", "-o", "BatchMode=yes",
                                                       "-o", "ConnectTimeout=10", "-o",
                                                       "ServerAliveInterval=5", "-o",
                                                       "ServerAliveCountMax=3", "--", "node3",
                                                       plan.nodes[2].remoteCommand});
}

TEST_CASE("nproc: --nproc_per_node wins over slots, --export, --remote_workdir, --ssh_config",
          "[unit]") {
  const auto plan =
      sshPlanOk({"--hosts=a:4,b", "--nproc_per_node=3", "--export=DATA,MODE=fast", "--export=HOME",
                 "--remote_workdir=/scratch/run", "--remote_dtrun=/usr/bin/dtrun",
                 "--ssh_config=/etc/dtrun/ssh_config", "--rdzv_conf=join_timeout=60", "train.py"});
  REQUIRE(plan.nodes.size() == 2);
  CHECK(plan.rdzvId == "generated-id");
  const std::string& command = plan.nodes[0].remoteCommand;
  INFO(command);
  CHECK(
      command.starts_with("cd -- /scratch/run && exec env 'DATA=/data set' HOME=/home/u "
                          "MODE=fast NCCL_DEBUG=INFO PET_MAX_RESTARTS=2 PYTHONPATH=/src "
                          "/usr/bin/dtrun --watch_stdin --nnodes=2 --node_rank=0"));
  CHECK(command.find("--rdzv_conf=join_timeout=60,is_host=true --nproc_per_node=3 -- train.py") !=
        std::string::npos);
  CHECK(command.find("PATH=/launcher") == std::string::npos);
  CHECK(plan.nodes[1].argv[10] == "-F");
  CHECK(plan.nodes[1].argv[11] == "/etc/dtrun/ssh_config");
  CHECK(plan.nodes[1].argv[13] == "b");
}

TEST_CASE("the store: --rdzv_endpoint names it, is_host only where it is", "[unit]") {
  auto plan = sshPlanOk({"--hosts=a,b,c", "--rdzv_endpoint=b:29400", "./w"});
  CHECK(plan.rdzvEndpoint == "b:29400");
  CHECK(plan.nodes[0].remoteCommand.find("is_host=false") != std::string::npos);
  CHECK(plan.nodes[1].remoteCommand.find("is_host=true") != std::string::npos);
  plan = sshPlanOk({"--hosts=a,b", "--rdzv_endpoint=store-host", "./w"});
  CHECK(plan.rdzvEndpoint == "store-host:29400");
  CHECK(plan.nodes[0].remoteCommand.find("is_host") == std::string::npos);
  plan = sshPlanOk({"--hosts=u@a,b", "--include=b", "--dry_run", "./w"});
  REQUIRE(plan.nodes.size() == 1);
  CHECK(plan.dryRun);
  CHECK(plan.rdzvEndpoint.starts_with("b:"));
  CHECK(launcher::sshPlanText(plan).find("node 0 on b:") != std::string::npos);
  // One --report for the job: only the store's host writes it, with every node's record.
  plan = sshPlanOk({"--hosts=a,b,c", "--rdzv_endpoint=b:29400", "--report=/shared/r.json", "./w"});
  CHECK(plan.nodes[0].remoteCommand.find("--report") == std::string::npos);
  CHECK(plan.nodes[1].remoteCommand.find("--report=/shared/r.json") != std::string::npos);
  CHECK(plan.nodes[2].remoteCommand.find("--report") == std::string::npos);
}

TEST_CASE("launches over ssh refused before any connection", "[unit]") {
  CHECK(refusal({"--hostfile=hosts.txt", "--node_rank=1", "./w"}) ==
        "--node_rank cannot be given with --hostfile or --hosts: each host's node rank is its "
        "position in the host list");
  CHECK(refusal({"--hostfile=hosts.txt", "--hosts=a", "./w"})
            .starts_with("--hostfile and --hosts cannot be used together"));
  CHECK(refusal({"--hostfile=missing.txt", "./w"})
            .starts_with("--hostfile: cannot read "
                         "'missing.txt'"));
  CHECK(refusal({"--hostfile=hosts.txt", "--nnodes=2", "./w"}) ==
        "--nnodes=2 disagrees with the 3 hosts to run on (leave --nnodes out: it is the host "
        "count)");
  CHECK(refusal({"--hostfile=hosts.txt", "--rdzv_backend=static", "./w"})
            .starts_with("--rdzv_backend: hosts started over ssh meet through c10d"));
  CHECK(refusal({"--hostfile=hosts.txt", "--rdzv_conf=is_host=1", "./w"})
            .starts_with("--rdzv_conf: is_host is set per host"));
  CHECK(refusal({"--hostfile=hosts.txt", "--export=NOPE", "./w"}) ==
        "--export: NOPE is not set here (set it, or give its value: --export=NOPE=value)");
  CHECK(refusal({"--hostfile=hosts.txt", "--export=1X", "./w"})
            .starts_with("--export: '1X' is not VAR or VAR=value"));
  // Node 0's options go through validate() here: a bad value is one line before ssh.
  CHECK(refusal({"--hostfile=hosts.txt", "--max_restarts=-1", "./w"}) ==
        "--max_restarts: expected a non-negative integer, got '-1'");
  CHECK(refusal({"--hostfile=hosts.txt"}).starts_with("missing the entrypoint"));
  launcher::HostFacts noSsh = hostWithFiles();
  CLI::App app{"dtrun"};
  launcher::RawOptions raw;
  launcher::addLaunchOptions(app, raw);
  raw.given["hosts"] = "a";
  raw.program = {"./w"};
  launcher::SshFacts facts = sshFacts();
  facts.sshProgram.clear();
  CHECK(launcher::planSsh(raw, noSsh, facts)
            .status()
            .message()
            .starts_with("--hostfile/--hosts: no ssh on PATH"));
}

TEST_CASE("ssh-only options without --hostfile are refused, shell quoting", "[unit]") {
  launcher::RawOptions raw;
  raw.given["export"] = "A";
  CHECK(launcher::checkNoSshOptions(raw).message() ==
        "--export applies to a launch over ssh only: add --hostfile=FILE or --hosts=a,b,c");
  raw.given.clear();
  CHECK(launcher::checkNoSshOptions(raw).isOk());
  CHECK(launcher::shellQuote("plain/path-1.2:x=y,z") == "plain/path-1.2:x=y,z");
  CHECK(launcher::shellQuote("") == "''");
  CHECK(launcher::shellQuote("a b") == "'a b'");
  CHECK(launcher::shellQuote("it's $HOME") == "'it'\\''s $HOME'");
  CHECK(launcher::rdzvPortFor("a") != launcher::rdzvPortFor("b"));
}
