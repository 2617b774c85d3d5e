// EtcdClient over etcd's v3 JSON gateway: each call one POST (etcd_http.h) to the first endpoint
// that answers, keys and values in base64, 64-bit numbers as JSON strings.
#include <algorithm>
#include <mutex>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "dtrun/etcd.h"

#include "etcd_http.h"
#include "etcd_json.h"
#include "json_text.h"
#include "log.h"

namespace dtrun::rdzv {
namespace {

using detail::base64;
using detail::compareJson;
using detail::EtcdHttp;
using detail::etcdMessage;
using detail::headerRevision;
using detail::isEtcdError;
using detail::keyValue;
using detail::keyValues;
using detail::number;
using detail::opJson;
using detail::rangeRequest;
using nlohmann::json;
using Clock = EtcdHttp::Clock;
using std::chrono::milliseconds;

class GatewayClient final : public EtcdClient {
 public:
  GatewayClient(EtcdOptions options, std::unique_ptr<EtcdHttp> http)
      : options_(std::move(options)), http_(std::move(http)) {
    for (auto& e : options_.endpoints) {
      for (const char* scheme : {"https://", "http://"}) {
        if (e.starts_with(scheme)) {
          e.erase(0, std::string_view(scheme).size());
        }
      }
      while (e.ends_with('/')) {
        e.pop_back();
      }
    }
    servedEtcd_ = std::make_unique<std::atomic<bool>[]>(options_.endpoints.size());
  }

  Status start() {
    if (options_.endpoints.empty()) {
      return Status::invalidArgument("etcd: no endpoint (give etcd's client URLs, host:port)");
    }
    if (!options_.user.empty()) {
      return authenticate();
    }
    // Reach one endpoint now: a wrong address or CA fails here, with one line. A read, not the
    // status call: an etcd with auth answers the status to anyone but refuses a read without a
    // user, and that too must fail here.
    return call("/v3/kv/range", {{"key", base64("/")}, {"count_only", true}}).status();
  }

  Result<std::optional<EtcdKeyValue>> get(std::string_view key) override {
    DTRUN_ASSIGN_OR_RETURN(auto reply, call("/v3/kv/range", rangeRequest(key, false)));
    auto kvs = keyValues(reply);
    if (kvs.empty()) {
      return std::optional<EtcdKeyValue>();
    }
    return std::optional<EtcdKeyValue>(std::move(kvs.front()));
  }

  Result<EtcdRange> getPrefix(std::string_view prefix, std::int64_t limit, bool byCreateRevision,
                              bool keysOnly) override {
    json request = rangeRequest(prefix, true);
    if (limit > 0) {
      request["limit"] = std::to_string(limit);
    }
    if (byCreateRevision) {
      request["sort_target"] = "CREATE";
      request["sort_order"] = "ASCEND";
    }
    if (keysOnly) {
      request["keys_only"] = true;
    }
    DTRUN_ASSIGN_OR_RETURN(auto reply, call("/v3/kv/range", request));
    EtcdRange range;
    range.kvs = keyValues(reply);
    range.revision = headerRevision(reply);
    range.count = number(reply, "count");
    return range;
  }

  Result<std::int64_t> put(std::string_view key, std::string_view value,
                           std::int64_t lease) override {
    json request = {{"key", base64(key)}, {"value", base64(value)}};
    if (lease != 0) {
      request["lease"] = std::to_string(lease);
    }
    DTRUN_ASSIGN_OR_RETURN(auto reply, call("/v3/kv/put", request));
    return headerRevision(reply);
  }

  Result<std::int64_t> erase(std::string_view key, bool prefix) override {
    DTRUN_ASSIGN_OR_RETURN(auto reply, call("/v3/kv/deleterange", rangeRequest(key, prefix)));
    return number(reply, "deleted");
  }

  Result<EtcdTxnResult> txn(const std::vector<EtcdCompare>& compares,
                            const std::vector<EtcdOp>& success,
                            const std::vector<EtcdOp>& failure) override {
    json request = {
        {"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
    for (const auto& c : compares) {
      request["compare"].push_back(compareJson(c));
    }
    for (const auto& op : success) {
      request["success"].push_back(opJson(op));
    }
    for (const auto& op : failure) {
      request["failure"].push_back(opJson(op));
    }
    DTRUN_ASSIGN_OR_RETURN(auto reply, call("/v3/kv/txn", request));
    EtcdTxnResult result;
    result.succeeded = reply.value("succeeded", false);
    result.revision = headerRevision(reply);
    if (reply.contains("responses")) {
      for (const auto& r : reply.at("responses")) {
        if (r.contains("response_range")) {
          result.gets.push_back(keyValues(r.at("response_range")));
          result.counts.push_back(number(r.at("response_range"), "count"));
        }
      }
    }
    return result;
  }

  Result<std::int64_t> grantLease(std::chrono::seconds ttl) override {
    DTRUN_ASSIGN_OR_RETURN(auto reply,
                           call("/v3/lease/grant", {{"TTL", std::to_string(ttl.count())}}));
    const auto id = number(reply, "ID");
    if (id == 0) {
      return Status::protocol("etcd at " + endpoints() + " granted no lease: " + jsonText(reply));
    }
    return id;
  }

  Status keepAlive(std::int64_t lease, milliseconds wait) override {
    // A stream in gRPC: one request, the first reply is the answer.
    json answer;
    DTRUN_TRY(withFreshToken([&] {
      answer = json();
      return streamCall("/v3/lease/keepalive", {{"ID", std::to_string(lease)}},
                        Clock::now() + std::min(wait, options_.timeout), nullptr,
                        [&](const json& message) {
                          answer = message;
                          return true;
                        });
    }));
    const json& result = answer.contains("result") ? answer.at("result") : answer;
    if (answer.is_null()) {
      return Status::timeout("etcd at " + endpoints() + ": no answer to a lease keep-alive");
    }
    if (number(result, "TTL") <= 0) {
      return Status::error(Errc::kNotFound, "etcd lease " + std::to_string(lease) + " has expired");
    }
    return Status::ok();
  }

  Status revokeLease(std::int64_t lease) override {
    auto s = call("/v3/lease/revoke", {{"ID", std::to_string(lease)}}).status();
    // Expired while this agent was paused or cut off: gone already, as a revoke would leave it.
    return s.code() == Errc::kNotFound ? Status::ok() : s;
  }

  Result<std::vector<EtcdEvent>> watch(std::string_view key, bool prefix, std::int64_t fromRevision,
                                       milliseconds timeout,
                                       const std::atomic<bool>* cancel) override {
    json create = rangeRequest(key, prefix);
    if (fromRevision > 0) {
      create["start_revision"] = std::to_string(fromRevision);
    }
    std::vector<EtcdEvent> events;
    Status problem;
    const auto until = Clock::now() + timeout;
    DTRUN_TRY(withFreshToken([&] {
      events.clear();
      problem = Status::ok();
      const auto s = watchOnce(key, create, until, cancel, events, problem);
      return s.isOk() ? problem : s;
    }));
    return events;
  }

  [[nodiscard]] milliseconds requestTimeout() const override { return options_.timeout; }

  [[nodiscard]] std::string endpoints() const override {
    std::string text;
    for (const auto& e : options_.endpoints) {
      text += (text.empty() ? "" : ",") + e;
    }
    return text;
  }

 private:
  Status watchOnce(std::string_view key, const json& create, Clock::time_point until,
                   const std::atomic<bool>* cancel, std::vector<EtcdEvent>& events,
                   Status& problem) {
    return streamCall(
        "/v3/watch", {{"create_request", create}}, until, cancel, [&](const json& message) {
          const json& r = message.contains("result") ? message.at("result") : message;
          if (r.value("canceled", false)) {
            problem = Status::protocol("etcd at " + endpoints() + " cancelled a watch of '" +
                                       std::string(key) + "': " + r.value("cancel_reason", "") +
                                       " (compact revision " +
                                       std::to_string(number(r, "compact_revision")) + ")");
            return true;
          }
          if (r.contains("events")) {
            for (const auto& e : r.at("events")) {
              EtcdEvent event;
              event.type = e.value("type", "PUT") == "DELETE" ? EtcdEvent::Type::kDelete
                                                              : EtcdEvent::Type::kPut;
              event.kv = keyValue(e.at("kv"));
              events.push_back(std::move(event));
            }
          }
          return !events.empty();
        });
  }

  // A stream (watch, keep-alive), run again once with a new token when etcd says it no longer
  // knows ours: its simple tokens lapse after --auth-token-ttl unused, and a restarted member
  // forgets them. Unary calls do the same in call().
  template <typename Run>
  Status withFreshToken(Run&& run) {
    Status s = run();
    if (!s.isOk() && !options_.user.empty() &&
        s.message().find("auth token") != std::string::npos) {
      DTRUN_TRY(authenticate());
      s = run();
    }
    return s;
  }

  [[nodiscard]] std::string token() const {
    const std::lock_guard lock(mutex_);
    return token_;
  }

  Status authenticate() {
    auto reply = callOnce("/v3/auth/authenticate",
                          {{"name", options_.user}, {"password", options_.password}}, "");
    if (!reply.isOk()) {
      if (reply.status().code() == Errc::kProtocol) {
        return Status::error(Errc::kDenied,
                             "etcd at " + endpoints() + ": authentication failed for user '" +
                                 options_.user + "': " + reply.status().message() +
                                 " (check --rdzv_conf user and password, or DTRUN_ETCD_PASSWORD)");
      }
      return reply.status();
    }
    const std::lock_guard lock(mutex_);
    token_ = reply.value().value("token", "");
    return Status::ok();
  }

  // A call, authenticated again once when etcd says the token is no longer valid.
  Result<json> call(std::string_view path, const json& request) {
    auto reply = callOnce(path, request, token());
    if (!reply.isOk() && !options_.user.empty() &&
        reply.status().message().find("auth token") != std::string::npos) {
      DTRUN_TRY(authenticate());
      reply = callOnce(path, request, token());
    }
    return reply;
  }

  // One request: the endpoints in turn, from the last one that answered, until one does or the
  // deadline passes. A member that cannot serve now (no leader, a leader change, a request that
  // timed out inside etcd) or cannot be reached is skipped; after a full turn, a short pause.
  Result<json> callOnce(std::string_view path, const json& request, const std::string& auth) {
    const auto deadline = Clock::now() + options_.timeout;
    const std::string body = jsonText(request);
    const std::size_t n = options_.endpoints.size();
    // Why each endpoint did not answer, last time it was tried: the error names them all.
    std::vector<std::string> why(n);
    bool unreachable = true;  // only transport failures so far: kConnection at the deadline
    for (int turn = 0;; ++turn) {
      const std::size_t first = current_.load();
      std::size_t notEtcd = 0;  // endpoints of this turn that serve no etcd API
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t at = (first + i) % n;
        const auto& endpoint = options_.endpoints[at];
        // One member may hold a request without refusing it (frozen, cut off): it gets a part
        // of the time, so that the others are asked before the whole request times out.
        const auto tryUntil = std::min(deadline, Clock::now() + perTryWait());
        auto reply = http_->post(endpoint, path, body, auth, tryUntil);
        // A 404 in etcd's own words (a lease not found) is an answer like any refusal.
        const bool noApi =
            reply.isOk() && reply.value().status == kNotFound && !isEtcdError(reply.value().body);
        if (noApi && servedEtcd_[at].load()) {
          // It served etcd's API before: an etcd resuming (after a pause, before its gRPC side
          // is back) answers 404 for a moment. Waited for, as any member that cannot serve now.
          why[at] = notEtcdAnswer(endpoint, path) + ", though it served etcd before";
          unreachable = false;
        } else if (noApi) {
          // Not etcd's gateway: a member that is gone may have left its port to another server.
          // Only when no endpoint serves etcd is that the answer.
          why[at] = notEtcdAnswer(endpoint, path);
          if (++notEtcd == n) {
            return Status::protocol(why[at] + "; check --rdzv_endpoint");
          }
          unreachable = false;
        } else if (reply.isOk() && reply.value().status == 200) {
          current_ = at;
          servedEtcd_[at] = true;
          try {
            return json::parse(reply.value().body);
          } catch (const json::exception& e) {
            return Status::protocol("etcd at " + endpoint + " answered " + std::string(path) +
                                    " with malformed JSON: " + e.what());
          }
        } else if (reply.isOk()) {
          const auto message = etcdMessage(reply.value().body);
          if (!transient(message)) {
            return refused(endpoint, path, message);
          }
          why[at] = "etcd at ";
          why[at] += endpoint;
          why[at] += ": ";
          why[at] += message;
          unreachable = false;
        } else if (reply.status().code() == Errc::kDenied) {
          return reply.status();
        } else if (reply.status().code() != Errc::kTimeout || why[at].empty()) {
          // A refusal says more than the deadline that cut the last try short.
          why[at] = reply.status().message();
        }
        current_ = (at + 1) % n;  // the next call starts with another member
        if (Clock::now() >= deadline) {
          return notDone(path, why, unreachable);
        }
      }
      if (turn == 0) {
        sayWaiting(path, joinReasons(why));
      }
      std::this_thread::sleep_for(turnPause(turn));
    }
  }

  // How long one member may hold one try of a request (EtcdOptions::tryTimeout).
  [[nodiscard]] milliseconds perTryWait() const {
    if (options_.tryTimeout > milliseconds(0)) {
      return options_.tryTimeout;
    }
    return std::max<milliseconds>(milliseconds(6000), options_.timeout / 4);
  }

  // Said once per request, within a second of its first failed turn: nobody waits in silence.
  void sayWaiting(std::string_view path, const std::string& why) const {
    log::rdzv().warn("waiting for etcd at {} ({}): retrying {} for up to {} s", endpoints(), why,
                     path,
                     std::chrono::duration_cast<std::chrono::seconds>(options_.timeout).count());
  }

  // The pause after a turn over the endpoints in which none answered.
  static milliseconds turnPause(int turn) {
    return std::min<milliseconds>(milliseconds(50 * (turn + 1)), milliseconds(500));
  }

  // Why each endpoint did not answer, in one line.
  static std::string joinReasons(const std::vector<std::string>& why) {
    std::string text;
    for (const auto& w : why) {
      if (!w.empty()) {
        text += text.empty() ? "" : "; ";
        text += w;
      }
    }
    return text;
  }

  static constexpr unsigned kNotFound = 404;

  static std::string notEtcdAnswer(const std::string& endpoint, std::string_view path) {
    return "etcd at " + endpoint + ": " + std::string(path) +
           " not found (HTTP 404: no etcd v3 API at this address)";
  }

  // etcd's answer when it is not one a moment's wait can change.
  [[nodiscard]] Status refused(const std::string& endpoint, std::string_view path,
                               const std::string& message) const {
    if (message.find("requested lease not found") != std::string::npos) {
      return Status::error(Errc::kNotFound, "etcd at " + endpoint + ": " + std::string(path) +
                                                ": " + message +
                                                " (the lease expired: its agent was silent for "
                                                "longer than --rdzv_conf lease_ttl)");
    }
    if (message.find("user name is empty") != std::string::npos) {
      return Status::error(Errc::kDenied, "etcd at " + endpoint +
                                              " requires a user and password (set --rdzv_conf "
                                              "user and password)");
    }
    if (message.find("permission denied") != std::string::npos) {
      return Status::error(Errc::kDenied, "etcd at " + endpoint + ": " + std::string(path) + ": " +
                                              message + " (user '" + options_.user +
                                              "' needs readwrite on the job's prefix)");
    }
    return Status::protocol("etcd at " + endpoint + ": " + std::string(path) + ": " + message);
  }

  [[nodiscard]] Status notDone(std::string_view path, const std::vector<std::string>& why,
                               bool unreachable) const {
    return Status::error(unreachable ? Errc::kConnection : Errc::kTimeout,
                         "etcd at " + endpoints() + ": " + std::string(path) + " not done in " +
                             std::to_string(options_.timeout.count()) + " ms (" + joinReasons(why) +
                             "); check --rdzv_endpoint");
  }

  // etcd's answers that another member, or the same a moment later, may not give.
  static bool transient(const std::string& message) {
    for (const char* known : {"leader changed", "no leader", "request timed out",
                              "too many requests", "unavailable", "not capable"}) {
      if (message.find(known) != std::string::npos) {
        return true;
      }
    }
    return false;
  }

  // A streaming call: `onMessage` gets each complete JSON message (one per line) until it
  // returns true; the endpoints in turn until one answers. When none does, turns again after a
  // short pause, as callOnce does, for up to the request timeout (--rdzv_conf read_timeout): an
  // etcd restarting, or briefly away, is not a lost store. A watch whose own time ends meanwhile
  // returns nothing, as if nothing happened (its caller reads again before it watches again).
  Status streamCall(std::string_view path, const json& request, Clock::time_point deadline,
                    const std::atomic<bool>* cancel,
                    const std::function<bool(const json&)>& onMessage) {
    std::optional<Clock::time_point> giveUpAt;
    for (int turn = 0;; ++turn) {
      std::string tried;
      Status s = streamTurn(path, request, deadline, cancel, onMessage, tried);
      if (s.code() != Errc::kConnection) {
        return s;
      }
      const auto now = Clock::now();
      if (!giveUpAt) {
        giveUpAt = now + options_.timeout;
        sayWaiting(path, tried);
      }
      if (now >= *giveUpAt) {
        return Status::connection("no etcd endpoint answered " + std::string(path) + " for " +
                                  std::to_string(options_.timeout.count()) + " ms (" + tried +
                                  "); check --rdzv_endpoint");
      }
      if (now >= deadline) {
        return Status::ok();
      }
      const auto pause =
          std::min(turnPause(turn), std::chrono::duration_cast<milliseconds>(deadline - now));
      for (auto slept = milliseconds(0); slept < pause; slept += milliseconds(50)) {
        if (cancel != nullptr && cancel->load()) {
          return Status::error(Errc::kCancelled, std::string(path) + ": cancelled");
        }
        std::this_thread::sleep_for(milliseconds(50));
      }
    }
  }

  // One turn over the endpoints: kConnection (naming each in `tried`) when none answered.
  Status streamTurn(std::string_view path, const json& request, Clock::time_point deadline,
                    const std::atomic<bool>* cancel,
                    const std::function<bool(const json&)>& onMessage, std::string& tried) {
    const std::string body = jsonText(request);
    const std::size_t n = options_.endpoints.size();
    const std::size_t first = current_.load();
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t at = (first + i) % n;
      const auto& endpoint = options_.endpoints[at];
      std::size_t parsed = 0;
      Status bad;
      bool notEtcd = false;  // skipped as callOnce skips it; the next endpoint may serve etcd
      auto s = http_->stream(
          endpoint, path, body, token(), deadline, cancel,
          [&](unsigned status, const std::string& text) {
            if (status == kNotFound) {
              notEtcd = true;
              return true;
            }
            if (status != 200) {
              bad = Status::protocol("etcd at " + endpoint + ": " + std::string(path) + ": " +
                                     etcdMessage(text));
              return true;
            }
            servedEtcd_[at] = true;
            for (auto end = text.find('\n', parsed); end != std::string::npos;
                 end = text.find('\n', parsed)) {
              const auto line = text.substr(parsed, end - parsed);
              parsed = end + 1;
              try {
                const json message = json::parse(line);
                if (message.contains("error")) {
                  bad = Status::protocol("etcd at " + endpoint + ": " + std::string(path) + ": " +
                                         etcdMessage(line));
                  return true;
                }
                if (onMessage(message)) {
                  return true;
                }
              } catch (const json::exception&) {
                continue;  // not a whole message: skip it
              }
            }
            return false;
          });
      if (s.isOk() && notEtcd) {
        s = Status::protocol(notEtcdAnswer(endpoint, path));
      } else if (s.isOk()) {
        // Not even the stream's first message before the deadline: this member may be the one
        // in trouble; the next call starts with another.
        current_ = parsed == 0 && bad.isOk() ? (at + 1) % n : at;
        return bad;
      }
      if (s.code() == Errc::kDenied || s.code() == Errc::kCancelled) {
        return s;
      }
      tried += tried.empty() ? "" : "; ";
      tried += s.message();
    }
    return Status::connection("no etcd endpoint answered " + std::string(path) + " (" + tried +
                              "); check --rdzv_endpoint");
  }

  EtcdOptions options_;
  std::unique_ptr<EtcdHttp> http_;
  std::atomic<std::size_t> current_{0};
  // Per endpoint: it answered etcd's API once (a later 404 is then a passing state, not a port
  // taken by another server).
  std::unique_ptr<std::atomic<bool>[]> servedEtcd_;
  mutable std::mutex mutex_;
  std::string token_;
};

}  // namespace

Result<std::unique_ptr<EtcdClient>> EtcdClient::connect(const EtcdOptions& options) {
  if (!options.certFile.empty() && options.caFile.empty()) {
    return Status::invalidArgument("etcd: a client certificate needs the CA (--rdzv_conf cacert)");
  }
  DTRUN_ASSIGN_OR_RETURN(auto http,
                         EtcdHttp::create({options.caFile, options.certFile, options.keyFile}));
  auto client = std::make_unique<GatewayClient>(options, std::move(http));
  DTRUN_TRY(client->start());
  return std::unique_ptr<EtcdClient>(std::move(client));
}

}  // namespace dtrun::rdzv
