#include "health/health_gate.h"

#include <algorithm>
#include <iostream>

#include "log.h"

namespace dtrun::agent::detail {
namespace {

// dtrun-netcheck bounds its exchange itself; this is its time to start and print on top.
constexpr std::chrono::milliseconds kNetcheckGrace{3000};
// How long a round's end waits for this node's network check to print (the figures are all
// gathered when the node they named leaves; a check waiting for an absent peer is cut off).
constexpr std::chrono::milliseconds kNetcheckAfterRoundEnd{1000};

// What this node makes of one dtrun-netcheck run.
struct NetworkVerdict {
  CheckResult result;
  NetVerdict verdict;         // when the figures were read
  bool othersCutOff = false;  // a timeout that named another node
};

NetworkVerdict judgeRun(const std::string& output, bool killed, const NetcheckPlace& place,
                        const std::string& host, const HealthChecks& checks) {
  NetworkVerdict v;
  CheckResult& r = v.result;
  const auto measured = parseNetcheckOutput(output);
  if (measured.isOk()) {
    v.verdict = judgeNetwork(measured.value(), place.nodeRank, checks);
    r = v.verdict.result;
    r.network = networkJson(measured.value(), v.verdict, checks);
    return v;
  }
  r.check = std::string(kCheckNetwork);
  const bool late = killed || measured.status().code() == Errc::kTimeout;
  r.outcome = late ? CheckResult::Outcome::kTimedOut : CheckResult::Outcome::kFailed;
  r.detail = killed ? "dtrun-netcheck did not finish within " +
                          std::to_string(checks.timeout.count()) + " ms (--health_check_timeout)"
                    : measured.status().message();
  const auto cutOff = namedUnreachable(output, place.nodeCount);
  if (std::find(cutOff.begin(), cutOff.end(), place.nodeRank) != cutOff.end()) {
    r.outcome = CheckResult::Outcome::kFailed;
    r.detail = "no other node could reach node " + std::to_string(place.nodeRank) + " (" + host +
               "): " + r.detail;
  } else {
    for (const int rank : cutOff) {
      r.detail += "; no other node could reach node " + std::to_string(rank);
    }
    v.othersCutOff = !cutOff.empty();
  }
  return v;
}

}  // namespace

HealthGate::HealthGate(boost::asio::io_context& io, const AgentConfig& config, std::string host,
                       const std::vector<std::string>& inheritedEnv, Hooks hooks)
    : io_(io),
      config_(config),
      host_(std::move(host)),
      inheritedEnv_(inheritedEnv),
      hooks_(std::move(hooks)),
      runner_(io, systemHealthProbe()),
      grace_(io) {}

Status HealthGate::checkHere(const HealthPlan& plan) {
  if (!config_.healthChecks.any()) {
    return Status::ok();
  }
  return judge(runner_.runHere(plan));
}

void HealthGate::checkBeforeRound(HealthPlan plan, std::function<void()> next) {
  if (!config_.healthChecks.any()) {
    next();
    return;
  }
  runner_.run(std::move(plan),
              [this, next = std::move(next)](const std::vector<CheckResult>& results) {
                if (hooks_.stopped()) {
                  return;
                }
                if (const Status s = judge(results); !s.isOk()) {
                  hooks_.leave(s);
                  return;
                }
                next();
              });
}

// Every result to the record; the first failure's console line.
Status HealthGate::judge(const std::vector<CheckResult>& results) {
  hooks_.record(results);
  for (const auto& r : results) {
    if (!r.passed()) {
      return Status::error(Errc::kSystem, failureLine(host_, r));
    }
    log::agent().debug("health check {}: {}", r.check, r.detail);
  }
  return Status::ok();
}

void HealthGate::checkNetwork(int round, NetcheckPlace place) {
  checking_ = true;
  round_ = round;
  place_ = std::move(place);
  pendingEnd_ = nullptr;
  const auto bound = config_.healthChecks.timeout;
  const auto& program = config_.healthChecks.netcheckProgram;
  const auto began = std::chrono::steady_clock::now();
  auto run = NetcheckRun::start(
      io_, program, {program, "--host", host_, "--timeout_ms", std::to_string(bound.count())},
      netcheckEnvironment(inheritedEnv_, place_), bound + kNetcheckGrace,
      [this, began](const std::string& output, bool killed) {
        onNetworkChecked(output, killed, began);
      });
  if (!run.isOk()) {
    CheckResult r;
    r.check = std::string(kCheckNetwork);
    r.outcome = CheckResult::Outcome::kFailed;
    r.detail = "cannot run " + program + ": " + run.status().message();
    r.at = std::chrono::system_clock::now();
    r.round = round;
    hooks_.leave(judge({r}));
    return;
  }
  netcheck_ = std::move(run).value();
}

void HealthGate::onNetworkChecked(const std::string& output, bool killed,
                                  std::chrono::steady_clock::time_point began) {
  // Reaped now: an owned child left unreaped would stop the subreaper's orphan reaping.
  netcheck_.reset();
  if (!checking_ || hooks_.stopped()) {
    return;
  }
  auto [r, verdict, othersCutOff] = judgeRun(output, killed, place_, host_, config_.healthChecks);
  const auto took = std::chrono::steady_clock::now() - began;
  r.at = std::chrono::system_clock::now() -
         std::chrono::duration_cast<std::chrono::system_clock::duration>(took);
  r.took = std::chrono::duration_cast<std::chrono::milliseconds>(took);
  r.round = round_;
  const Status s = judge({r});
  if (r.outcome == CheckResult::Outcome::kFailed) {
    hooks_.leave(s);  // this node is below the floor, or its check could not run
    return;
  }
  if (pendingEnd_) {
    handOnRoundEnd();  // e.g. the node this check named left first
    return;
  }
  if (r.outcome == CheckResult::Outcome::kTimedOut) {
    // A peer that never showed up (its agent died, or its network is down): the round forms
    // again without a dead node. A node whose check times out twice in a row is the one cut off.
    if (!othersCutOff && ++timeouts_ >= 2) {
      hooks_.leave(s);
      return;
    }
    std::cerr << "dtrun: " << s.message() << "; the round forms again\n";
    hooks_.formAgain("network check incomplete on " + host_ + ": " + r.detail);
    return;  // the round's end comes back through roundEnded
  }
  timeouts_ = 0;
  if (!verdict.warning.empty()) {
    log::agent().warn("health check network: {}", verdict.warning);
  }
  if (!verdict.named.empty()) {
    log::agent().warn("health check network: {}; waiting for the round to form again", r.detail);
    return;  // the named node leaves: the round's end comes back through roundEnded
  }
  log::agent().info("health check network passed: {}", r.detail);
  checking_ = false;
  hooks_.networkPassed();
}

void HealthGate::roundEnded(std::function<void()> handOn) {
  pendingEnd_ = std::move(handOn);
  if (!netcheck_) {
    handOnRoundEnd();
    return;
  }
  // The check is about to print when the end is the node it named leaving; a check still
  // waiting for a peer that will not come is not waited out.
  grace_.expires_after(kNetcheckAfterRoundEnd);
  grace_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && !hooks_.stopped() && netcheck_ && pendingEnd_) {
      handOnRoundEnd();
    }
  });
}

void HealthGate::handOnRoundEnd() {
  checking_ = false;
  netcheck_.reset();
  grace_.cancel();
  std::exchange(pendingEnd_, nullptr)();
}

}  // namespace dtrun::agent::detail
