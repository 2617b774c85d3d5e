// A node's way into a grouped job (dtrun/group_relay.h): a ticket from the job's store says
// which group it is in and whether it leads it; then it is an ordinary member of its group's
// relay store, and a leader also runs that relay until its members are gone.
#include <charconv>

#include "dtrun/group_relay.h"

#include "log.h"
#include "round_codec.h"

namespace dtrun::rdzv {
namespace {

using std::chrono::milliseconds;

class GroupedMember final : public RoundMember {
 public:
  GroupedMember(std::unique_ptr<GroupRelay> relay, std::unique_ptr<RoundMember> member,
                std::string agentId, std::string relayName, milliseconds drainLimit)
      : relay_(std::move(relay)),
        member_(std::move(member)),
        agentId_(std::move(agentId)),
        relayName_(std::move(relayName)),
        drainLimit_(drainLimit) {}

  Result<JoinOutcome> join(const std::atomic<bool>& cancel,
                           const std::function<void(const std::string&)>& progress) override {
    return named(member_->join(cancel, progress));
  }
  Result<RoundEnd> waitEnd(const std::atomic<bool>& cancel) override {
    return named(member_->waitEnd(cancel));
  }
  Result<RoundEnd> endRound(const RoundEnd& end) override { return named(member_->endRound(end)); }
  Status heartbeat() override { return named(member_->heartbeat()); }
  Status done() override { return named(member_->done()); }
  // A leader that leaves alone takes its group's store along: its own leave goes out first.
  Status leave(const std::string& why) override {
    auto s = named(member_->leave(why));
    if (relay_) {
      relay_->drain(drainLimit_, agentId_);
    }
    return s;
  }
  // A leader's agent exits after its bye: its relay must first forward its members' byes.
  Status bye() override {
    auto s = named(member_->bye());
    if (relay_) {
      relay_->drain(drainLimit_);
    }
    return s;
  }
  Status waitFinished(milliseconds timeout) override { return member_->waitFinished(timeout); }

 private:
  // A failure here is the relay's (its leader's agent is gone, or it lost the job's store):
  // the message says which store this node lost.
  [[nodiscard]] Status named(const Status& s) const {
    return s.isOk() || s.code() == Errc::kCancelled ? s : s.withContext(relayName_);
  }
  template <typename T>
  [[nodiscard]] Result<T> named(Result<T> r) const {
    if (r.isOk()) {
      return r;
    }
    return named(r.status());
  }

  // Declared first, destroyed last: the member's connections go before the relay they use.
  std::unique_ptr<GroupRelay> relay_;
  std::unique_ptr<RoundMember> member_;
  std::string agentId_;
  std::string relayName_;
  milliseconds drainLimit_;
};

// "host:port" (an IPv6 host keeps its colons) into options for the relay's store.
Result<ClientOptions> relayAddress(const ClientOptions& jobStore, const std::string& text) {
  const auto colon = text.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      std::from_chars(text.data() + colon + 1, text.data() + text.size(), port).ec != std::errc() ||
      port <= 0 || port > 65535) {
    return Status::protocol("a group's relay address reads '" + text.substr(0, 80) +
                            "', not host:port");
  }
  ClientOptions options = jobStore;
  options.host = text.substr(0, colon);
  options.port = static_cast<std::uint16_t>(port);
  return options;
}

}  // namespace

Result<std::unique_ptr<RoundMember>> connectGroupMember(const ClientOptions& jobStore,
                                                        const std::string& jobId,
                                                        const RoundSettings& settings,
                                                        NodeRecord self,
                                                        const GroupOptions& group) {
  if (group.size < 2 || self.storeHost) {
    return RoundMember::connect(jobStore, jobId, settings, std::move(self));
  }
  const detail::RoundKeys keys(jobId);
  std::unique_ptr<GroupRelay> relay;
  std::string address;
  int g = 0;
  {
    DTRUN_ASSIGN_OR_RETURN(auto store, connectStore(jobStore));
    DTRUN_ASSIGN_OR_RETURN(auto ticket, store->takeTicket(keys.groupTickets()));
    const auto index = ticket - 1;
    g = static_cast<int>(index / group.size);
    if (index % group.size == 0) {
      DTRUN_ASSIGN_OR_RETURN(relay, GroupRelay::start(jobStore, jobId, settings, group.listenHost));
      address = group.advertiseHost + ":" + std::to_string(relay->port());
      DTRUN_TRY(store->set(keys.group(g), address));
      log::rdzv().info("job '{}': this node leads group {} (up to {} nodes), its relay at {}",
                       jobId, g, group.size, address);
    } else {
      auto published = store->waitGet(keys.group(g), settings.joinTimeout);
      if (!published.isOk() || !published.value()) {
        return Status::timeout(
            "job '" + jobId + "': group " + std::to_string(g) + "'s leader (the node with ticket " +
            std::to_string(static_cast<std::int64_t>(g) * group.size + 1) +
            ") published no relay within join_timeout" +
            (published.isOk() ? std::string() : ": " + published.status().message()));
      }
      address = std::move(*published.value());
    }
  }  // the job's store sees this node no more: its group's relay speaks for it
  DTRUN_ASSIGN_OR_RETURN(auto options, relayAddress(jobStore, address));
  std::string agentId = self.agentId;
  DTRUN_ASSIGN_OR_RETURN(
      auto member, RoundMember::connect(storeFactory(options), jobId, settings, std::move(self),
                                        /*askKeeperService=*/false));
  std::string relayName =
      "group " + std::to_string(g) + "'s relay at " + address + " (its leader's agent)";
  return std::unique_ptr<RoundMember>(
      std::make_unique<GroupedMember>(std::move(relay), std::move(member), std::move(agentId),
                                      std::move(relayName), settings.closeTimeout));
}

}  // namespace dtrun::rdzv
