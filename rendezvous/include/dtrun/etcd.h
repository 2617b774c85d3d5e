// A client of etcd's v3 API (through its JSON gateway, HTTP/1.1, optionally TLS and user/password
// auth) and a Store over it: the rendezvous backend for jobs that must survive the loss of any
// one machine. Every key a job writes lives under one prefix; leases tie keys to an agent's life.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtrun/common.h"
#include "dtrun/rendezvous.h"

namespace dtrun::rdzv {

struct EtcdOptions {
  // "host:port" client URLs (http:// or https:// in front is accepted). A request that cannot
  // reach one goes to the next; errors name the endpoint(s) tried.
  std::vector<std::string> endpoints;
  // Every request's deadline: connect, send and reply (a watch's wait takes its own timeout).
  std::chrono::milliseconds timeout{30000};
  // How long one member may hold one try of a request before the next member is asked; 0: a
  // quarter of `timeout`, at least 6 s (etcd answers "request timed out" after 5 s when its
  // leader is lost). Shorter for a call that must land within a bound (a heartbeat: the keeper's
  // dead-after time), so that silent members in a row cannot hold it past that bound.
  std::chrono::milliseconds tryTimeout{0};
  // TLS when caFile is set: the server is verified against it; certFile and keyFile (both or
  // neither) are the client's certificate.
  std::string caFile;
  std::string certFile;
  std::string keyFile;
  // etcd user/password auth when user is set (a token from /v3/auth/authenticate, renewed when
  // etcd says it expired).
  std::string user;
  std::string password;
};

struct EtcdKeyValue {
  std::string key;
  std::string value;
  std::int64_t createRevision = 0;
  std::int64_t modRevision = 0;
  std::int64_t version = 0;
  std::int64_t lease = 0;
};

struct EtcdEvent {
  enum class Type : std::uint8_t { kPut, kDelete };
  Type type = Type::kPut;
  EtcdKeyValue kv;  // for kDelete: key and modRevision only
};

// A condition of a transaction: `key`'s target compared with a number or a value.
struct EtcdCompare {
  enum class Target : std::uint8_t { kVersion, kCreateRevision, kModRevision, kValue, kLease };
  enum class Op : std::uint8_t { kEqual, kNotEqual, kGreater, kLess };
  std::string key;
  Target target = Target::kVersion;
  Op op = Op::kEqual;
  std::int64_t number = 0;  // kVersion, kCreateRevision, kModRevision, kLease
  std::string value;        // kValue
};

// One operation of a transaction's branch.
struct EtcdOp {
  enum class Type : std::uint8_t { kPut, kDelete, kGet };
  Type type = Type::kGet;
  std::string key;
  bool prefix = false;  // kDelete, kGet: every key that starts with `key`
  std::string value;    // kPut
  std::int64_t lease = 0;
  bool countOnly = false;  // kGet: only how many keys match (EtcdTxnResult::counts)
};

struct EtcdTxnResult {
  bool succeeded = false;
  std::int64_t revision = 0;                    // the store's revision after the transaction
  std::vector<std::vector<EtcdKeyValue>> gets;  // one entry per kGet of the branch that ran
  std::vector<std::int64_t> counts;             // and how many keys each matched
};

struct EtcdRange {
  std::vector<EtcdKeyValue> kvs;
  std::int64_t revision = 0;  // the store's revision the answer is from: watch from revision + 1
  std::int64_t count = 0;     // keys matched (also when `limit` cut kvs short)
};

// Thread-safe: every call is independent (its own connection, or one from a small pool).
// Failures: Errc::kTimeout (deadline), kConnection (no endpoint answered: names them all),
// kProtocol (etcd answered an error: its message), kDenied (a wrong password, certificate or
// CA: retrying cannot help), kInvalidArgument (bad options: names the
// option, e.g. "etcd: cannot read the CA file 'x': No such file or directory").
class EtcdClient {
 public:
  EtcdClient() = default;
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;
  EtcdClient(EtcdClient&&) = delete;
  EtcdClient& operator=(EtcdClient&&) = delete;
  virtual ~EtcdClient() = default;

  // Checks the options, reaches an endpoint and authenticates: a wrong certificate, CA or
  // password fails here, with one line that names the endpoint and what to fix.
  [[nodiscard]] static Result<std::unique_ptr<EtcdClient>> connect(const EtcdOptions& options);

  virtual Result<std::optional<EtcdKeyValue>> get(std::string_view key) = 0;
  // Keys starting with `prefix`, sorted by key (or by create revision), at most `limit` (0 = all).
  virtual Result<EtcdRange> getPrefix(std::string_view prefix, std::int64_t limit = 0,
                                      bool byCreateRevision = false, bool keysOnly = false) = 0;
  // Returns the revision of the write.
  virtual Result<std::int64_t> put(std::string_view key, std::string_view value,
                                   std::int64_t lease = 0) = 0;
  // Returns how many keys were deleted.
  virtual Result<std::int64_t> erase(std::string_view key, bool prefix = false) = 0;
  virtual Result<EtcdTxnResult> txn(const std::vector<EtcdCompare>& compares,
                                    const std::vector<EtcdOp>& success,
                                    const std::vector<EtcdOp>& failure) = 0;

  // A lease of `ttl`; keys put with it vanish when it is revoked or not kept alive.
  virtual Result<std::int64_t> grantLease(std::chrono::seconds ttl) = 0;
  // One keep-alive, waiting at most `wait` for the answer (a fraction of the lease's TTL: a member
  // that is frozen or cut off holds a request, it does not refuse it; the next keep-alive then
  // asks another member first); kNotFound when the lease has expired already.
  virtual Status keepAlive(std::int64_t lease, std::chrono::milliseconds wait) = 0;
  virtual Status revokeLease(std::int64_t lease) = 0;

  // Waits (a watch, never a poll) for the first events on `key` (or every key under it when
  // `prefix`) at or after `fromRevision`, up to `timeout`; returns them (empty on timeout).
  // `cancel` is checked at least every 200 ms.
  virtual Result<std::vector<EtcdEvent>> watch(std::string_view key, bool prefix,
                                               std::int64_t fromRevision,
                                               std::chrono::milliseconds timeout,
                                               const std::atomic<bool>* cancel = nullptr) = 0;

  // The endpoint(s) this client talks to, for messages: "127.0.0.1:2379,127.0.0.1:2479".
  [[nodiscard]] virtual std::string endpoints() const = 0;
  // How long a request waits for etcd before it fails (--rdzv_conf read_timeout).
  [[nodiscard]] virtual std::chrono::milliseconds requestTimeout() const = 0;
};

// A store whose writes hold only while its owner holds a key: each write goes in a transaction
// that also requires `key` to still have `createRevision` (the one its owner made). The keeper's
// key is the job's leader key: a keeper that was paused, or cut off, while another agent took
// over then writes nothing. A member's is its liveness key (on its lease): a member the job
// dropped when its lease expired writes nothing into the job either. Such writes fail with
// Errc::kDenied, `lost` naming what was lost.
struct EtcdFence {
  std::string key;
  std::int64_t createRevision = 0;
  std::string lost = "this agent no longer leads";
};

// The Store interface over etcd, every key under `prefix` (e.g. "/dtrun/job7/"): the round
// protocol runs on it unchanged. Queues are keys under "<queue>/" ordered by create revision,
// waits are watches, add/compareSet/append are transactions. Not thread-safe (as every Store);
// several may share one client. With a `fence`, every write is fenced (EtcdFence).
[[nodiscard]] Result<std::unique_ptr<Store>> makeEtcdStore(
    std::shared_ptr<EtcdClient> client, std::string prefix,
    std::optional<EtcdFence> fence = std::nullopt);

// One agent's presence in a job whose rendezvous lives in etcd: its lease (kept alive on a thread
// of its own), its key under "alive/" and its candidacy for the job's keeper. The agent that wins
// the election (a lease-backed key, created only if absent) runs the keeper (runKeeper) and,
// while it does, tells it of every agent whose lease ends (reportLost). When the keeper's agent
// dies, its lease lapses, its leader key vanishes with it and a waiting candidate takes over
// within the lease's TTL: the job loses no state, only the round the lost node was in.
class EtcdPresence {
 public:
  EtcdPresence() = default;
  EtcdPresence(const EtcdPresence&) = delete;
  EtcdPresence& operator=(const EtcdPresence&) = delete;
  EtcdPresence(EtcdPresence&&) = delete;
  EtcdPresence& operator=(EtcdPresence&&) = delete;
  // Stops the threads and revokes the lease: this agent's keys vanish at once.
  virtual ~EtcdPresence() = default;

  // `prefix`: the job's (every key of the job lives under it). `onLeaseLost`: called once, from
  // another thread, when etcd says the lease is gone (this agent was presumed dead).
  [[nodiscard]] static Result<std::unique_ptr<EtcdPresence>> start(
      std::shared_ptr<EtcdClient> client, std::string prefix, std::string jobId,
      std::string agentId, std::chrono::seconds leaseTtl,
      std::function<void(const Status&)> onLeaseLost);

  // Connections to the job's store (etcd under the prefix), for the round protocol and others.
  [[nodiscard]] virtual StoreFactory stores() const = 0;
  // The same, fenced alike, over another client of the same etcd (other timeouts: the notices').
  [[nodiscard]] virtual StoreFactory storesThrough(std::shared_ptr<EtcdClient> client) const = 0;
  // Whether this agent runs the job's keeper now.
  [[nodiscard]] virtual bool leads() const = 0;
  // Removes every key of the job: the last act of the keeper's agent once the job is over.
  virtual Status removeJobKeys() = 0;
};

}  // namespace dtrun::rdzv
