// The Store interface over etcd: every key under the job's prefix; waits are watches from the
// revision of the read that found the key missing (so nothing written in between is missed),
// read-modify-writes are transactions guarded by the key's mod revision, queue items are keys
// under "<queue>/" in create-revision order, tickets (and barriers) keys under "<key>/", counted.
#include <algorithm>
#include <atomic>
#include <random>

#include "dtrun/etcd.h"

namespace dtrun::rdzv {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// etcd's default --max-txn-ops is 128: longer batches go in several transactions.
constexpr std::size_t kTxnOps = 128;
// Under etcd's default --max-request-bytes (1.5 MiB), with room for the request's framing.
constexpr std::size_t kTxnBytes = std::size_t{1} << 20;

std::string keysText(std::span<const std::string> keys) {
  std::string text;
  for (const auto& k : keys) {
    if (text.size() > 200) {
      return "[" + text + ", ...]";
    }
    text += (text.empty() ? "" : ", ") + k;
  }
  return "[" + text + "]";
}

class EtcdStore final : public Store {
 public:
  EtcdStore(std::shared_ptr<EtcdClient> client, std::string prefix, std::optional<EtcdFence> fence)
      : client_(std::move(client)),
        prefix_(std::move(prefix)),
        jobNamespace_(jobNamespaceOf(prefix_)),
        fence_(std::move(fence)) {
    std::random_device seed;
    id_ = std::to_string(seed()) + std::to_string(seed());
  }

  Status set(std::string_view key, std::string_view value) override {
    if (!fence_) {
      return client_->put(full(key), value).status();
    }
    return write({}, {putOf(full(key), value)}, {}).status();
  }

  Result<Bytes> get(std::string_view key) override {
    const std::vector<std::string> keys{std::string(key)};
    DTRUN_TRY(waitFor(keys, timeout(), "get"));
    DTRUN_ASSIGN_OR_RETURN(auto kv, client_->get(full(key)));
    if (!kv) {
      return Status::error(Errc::kNotFound, "get(" + std::string(key) + ") on " + peer() +
                                                ": deleted while it was read");
    }
    return std::move(kv->value);
  }

  Result<std::optional<Bytes>> tryGet(std::string_view key) override {
    DTRUN_ASSIGN_OR_RETURN(auto kv, client_->get(full(key)));
    return kv ? std::optional<Bytes>(std::move(kv->value)) : std::nullopt;
  }

  Result<std::int64_t> add(std::string_view key, std::int64_t delta) override {
    std::int64_t result = 0;
    DTRUN_TRY(update(key, [&](const std::optional<std::string>& now) -> Result<std::string> {
      std::int64_t value = 0;
      if (now && !now->empty()) {
        try {
          std::size_t used = 0;
          value = std::stoll(*now, &used);
          if (used != now->size()) {
            throw std::invalid_argument("trailing characters");
          }
        } catch (const std::exception&) {
          return Status::protocol("add(" + std::string(key) + ") on " + peer() + ": '" +
                                  now->substr(0, 40) + "' is not a number");
        }
      }
      result = value + delta;
      return std::to_string(result);
    }));
    return result;
  }

  // A key of its own under "<key>/" and, in the same transaction (etcd runs them one at a
  // time), how many are there: no retries, one request, however many callers come at once.
  Result<std::int64_t> takeTicket(std::string_view key) override {
    const std::string dir = full(key) + "/";
    const std::string mine = dir + id_ + "-" + std::to_string(++pushes_);
    EtcdCompare absent;
    absent.key = mine;
    absent.target = EtcdCompare::Target::kCreateRevision;
    absent.number = 0;
    EtcdOp count;
    count.key = dir;
    count.prefix = true;
    count.countOnly = true;
    EtcdOp read;
    read.key = mine;
    DTRUN_ASSIGN_OR_RETURN(auto txn, write({absent}, {putOf(mine, ""), count}, {read}));
    if (!txn.succeeded) {
      // Our key is there already: this request reached etcd before and its answer was lost (the
      // client sent it again, e.g. across a leader change). Counting now would give a ticket
      // another node may hold; ours is our key's place among the keys by creation, as the lost
      // answer said.
      if (txn.gets.empty() || txn.gets.front().empty()) {
        return Status::protocol("take_ticket(" + std::string(key) + ") on " + peer() +
                                ": etcd's answer has neither the count nor the key");
      }
      // (etcd's max_create_revision does not narrow a count_only range: the keys are counted.)
      const std::int64_t created = txn.gets.front().front().createRevision;
      DTRUN_ASSIGN_OR_RETURN(auto all, client_->getPrefix(dir, 0, false, true));
      return static_cast<std::int64_t>(
          std::count_if(all.kvs.begin(), all.kvs.end(),
                        [&](const EtcdKeyValue& kv) { return kv.createRevision <= created; }));
    }
    if (txn.counts.empty()) {
      return Status::protocol("take_ticket(" + std::string(key) + ") on " + peer() +
                              ": etcd's answer has no count");
    }
    return txn.counts.front();
  }

  Result<std::int64_t> ticketsTaken(std::string_view key) override {
    DTRUN_ASSIGN_OR_RETURN(auto range, countUnder(key));
    return range.count;
  }

  Result<Bytes> compareSet(std::string_view key, std::string_view expected,
                           std::string_view desired) override {
    EtcdCompare c;
    c.key = full(key);
    if (expected.empty()) {
      c.target = EtcdCompare::Target::kCreateRevision;  // only if absent
      c.number = 0;
    } else {
      c.target = EtcdCompare::Target::kValue;
      c.value = std::string(expected);
    }
    EtcdOp put;
    put.type = EtcdOp::Type::kPut;
    put.key = c.key;
    put.value = std::string(desired);
    EtcdOp read;
    read.key = c.key;
    DTRUN_ASSIGN_OR_RETURN(auto txn, write({c}, {put}, {read}));
    if (txn.succeeded) {
      return Bytes(desired);
    }
    if (!txn.gets.empty() && !txn.gets.front().empty()) {
      return std::move(txn.gets.front().front().value);
    }
    return Bytes(expected);  // upstream's quirk: missing key, non-empty expected
  }

  Result<bool> check(std::span<const std::string> keys) override {
    DTRUN_ASSIGN_OR_RETURN(auto present, presence(keys));
    return std::all_of(present.found.begin(), present.found.end(), [](bool b) { return b; });
  }

  Status wait(std::span<const std::string> keys, milliseconds timeout) override {
    return waitFor(keys, timeout, "wait");
  }

  Result<std::int64_t> numKeys() override {
    DTRUN_ASSIGN_OR_RETURN(auto range, client_->getPrefix(prefix_, 1, false, true));
    return range.count;
  }

  Result<bool> deleteKey(std::string_view key) override {
    if (fence_) {  // whether it was there, read in the same transaction
      EtcdOp read;
      read.key = full(key);
      EtcdOp erase;
      erase.type = EtcdOp::Type::kDelete;
      erase.key = read.key;
      DTRUN_ASSIGN_OR_RETURN(auto txn, write({}, {read, erase}, {}));
      return !txn.gets.empty() && !txn.gets.front().empty();
    }
    DTRUN_ASSIGN_OR_RETURN(auto deleted, client_->erase(full(key), false));
    return deleted > 0;
  }

  Status append(std::string_view key, std::string_view value) override {
    return update(key, [&](const std::optional<std::string>& now) -> Result<std::string> {
      return now.value_or("") + std::string(value);
    });
  }

  Result<std::vector<Bytes>> multiGet(std::span<const std::string> keys) override {
    DTRUN_TRY(waitFor(keys, timeout(), "multi_get"));
    std::vector<Bytes> values;
    for (std::size_t at = 0; at < keys.size(); at += kTxnOps) {
      DTRUN_ASSIGN_OR_RETURN(auto txn, client_->txn({}, getsOf(keys, at), {}));
      for (auto& kvs : txn.gets) {
        values.push_back(kvs.empty() ? Bytes() : std::move(kvs.front().value));
      }
    }
    return values;
  }

  Status multiSet(std::span<const std::string> keys, std::span<const Bytes> values) override {
    if (keys.size() != values.size()) {
      return Status::invalidArgument("multi_set: " + std::to_string(keys.size()) + " keys but " +
                                     std::to_string(values.size()) + " values");
    }
    // etcd refuses a request over --max-request-bytes (1.5 MiB by default): a transaction ends
    // at kTxnOps puts or kTxnBytes of keys and values, whichever comes first.
    std::vector<EtcdOp> puts;
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const std::size_t size = prefix_.size() + keys[i].size() + values[i].size();
      if (!puts.empty() && (puts.size() == kTxnOps || bytes + size > kTxnBytes)) {
        DTRUN_TRY(write({}, puts, {}).status());
        puts.clear();
        bytes = 0;
      }
      EtcdOp op;
      op.type = EtcdOp::Type::kPut;
      op.key = full(keys[i]);
      op.value = values[i];
      puts.push_back(std::move(op));
      bytes += size;
    }
    return puts.empty() ? Status::ok() : write({}, puts, {}).status();
  }

  Result<std::chrono::microseconds> ping() override {
    const auto start = Clock::now();
    DTRUN_TRY(client_->get(full("ping")).status());
    return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
  }

  Status queuePush(std::string_view key, std::string_view value) override {
    // Unique per store and call; the order is etcd's create revision, not the name.
    const auto name = full(key) + "/" + id_ + "-" + std::to_string(++pushes_);
    if (!fence_) {
      return client_->put(name, value).status();
    }
    return write({}, {putOf(name, value)}, {}).status();
  }

  Result<Bytes> queuePop(std::string_view key, milliseconds timeout) override {
    DTRUN_ASSIGN_OR_RETURN(auto items, queuePopMany(key, 1, timeout));
    return std::move(items.front());
  }

  Result<std::vector<Bytes>> queuePopMany(std::string_view key, std::size_t maxItems,
                                          milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    const std::string dir = full(key) + "/";
    const auto limit = static_cast<std::int64_t>(std::clamp<std::size_t>(maxItems, 1, kTxnOps / 2));
    for (;;) {
      DTRUN_ASSIGN_OR_RETURN(auto range, client_->getPrefix(dir, limit, true, false));
      if (!range.kvs.empty()) {
        // Taken only if still there: another consumer may have taken some (then retry). The
        // same transaction writes a receipt of this pop: when etcd's answer is lost (its leader
        // killed mid-request), the client sends it again to another member, where the items
        // are gone and the compares fail; the receipt then says that the first try took them,
        // else they would be lost (a keeper's joins: a round that never closes). The receipt
        // goes once the answer came: nothing of a pop stays in the store.
        const std::string receipt = full(key) + ".taken/" + id_ + "-" + std::to_string(++pushes_);
        std::vector<EtcdCompare> unchanged;
        std::vector<EtcdOp> deletes;
        for (const auto& kv : range.kvs) {
          EtcdCompare c;
          c.key = kv.key;
          c.target = EtcdCompare::Target::kModRevision;
          c.number = kv.modRevision;
          unchanged.push_back(std::move(c));
          EtcdOp op;
          op.type = EtcdOp::Type::kDelete;
          op.key = kv.key;
          deletes.push_back(std::move(op));
        }
        deletes.push_back(putOf(receipt, ""));
        DTRUN_ASSIGN_OR_RETURN(auto txn, write(std::move(unchanged), deletes, {}));
        bool taken = txn.succeeded;
        if (!taken) {
          DTRUN_ASSIGN_OR_RETURN(auto kept, client_->get(receipt));
          taken = kept.has_value();
        }
        if (taken) {
          DTRUN_TRY(client_->erase(receipt, false).status());
          std::vector<Bytes> items;
          items.reserve(range.kvs.size());
          for (auto& kv : range.kvs) {
            items.push_back(std::move(kv.value));
          }
          return items;
        }
        continue;
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        return Status::timeout("queue_pop(" + std::string(key) + ") on " + peer() +
                               ": no item within " + std::to_string(timeout.count()) + "ms");
      }
      DTRUN_TRY(client_
                    ->watch(dir, true, range.revision + 1,
                            std::chrono::duration_cast<milliseconds>(deadline - now))
                    .status());
    }
  }

  Result<std::int64_t> queueLen(std::string_view key) override {
    DTRUN_ASSIGN_OR_RETURN(auto range, countUnder(key));
    return range.count;
  }

  Result<std::vector<Bytes>> listKeys() override {
    DTRUN_ASSIGN_OR_RETURN(auto range, client_->getPrefix(prefix_, 0, false, true));
    std::vector<Bytes> keys;
    keys.reserve(range.kvs.size());
    for (auto& kv : range.kvs) {
      keys.push_back(kv.key.substr(prefix_.size()));
    }
    return keys;
  }

  Status barrier(std::string_view key, std::int64_t worldSize, milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    DTRUN_TRY(takeTicket(key).status());
    const std::string dir = full(key) + "/";
    for (;;) {
      DTRUN_ASSIGN_OR_RETURN(auto range, countUnder(key));
      if (range.count >= worldSize) {
        return Status::ok();
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        return Status::timeout("barrier(" + std::string(key) + ", " + std::to_string(worldSize) +
                               ") on " + peer() + ": not everyone arrived within " +
                               std::to_string(timeout.count()) + "ms");
      }
      DTRUN_TRY(client_
                    ->watch(dir, true, range.revision + 1,
                            std::chrono::duration_cast<milliseconds>(deadline - now))
                    .status());
    }
  }

  [[nodiscard]] std::string peer() const override { return "etcd at " + client_->endpoints(); }

 private:
  // The round protocol and the agents name a job's keys "dtrun/<run id>/...", as they must on a
  // store that several jobs share; a job's etcd prefix ("/dtrun/<run id>/") is its own already,
  // so that part is not repeated under it.
  [[nodiscard]] std::string full(std::string_view key) const {
    if (!jobNamespace_.empty() && key.starts_with(jobNamespace_)) {
      key.remove_prefix(jobNamespace_.size());
    }
    return prefix_ + std::string(key);
  }
  // "dtrun/<last segment>/" of a prefix "/.../<last segment>/".
  static std::string jobNamespaceOf(const std::string& prefix) {
    if (prefix.size() < 2 || !prefix.ends_with('/')) {
      return {};
    }
    const auto start = prefix.rfind('/', prefix.size() - 2);
    return start == std::string::npos
               ? std::string()
               : "dtrun/" + prefix.substr(start + 1, prefix.size() - start - 1);
  }
  // How many keys there are under "<key>/" (a queue's items, tickets), and the revision read at.
  Result<EtcdRange> countUnder(std::string_view key) {
    return client_->getPrefix(full(key) + "/", 1, false, true);
  }
  // Reads of keys[at, at + kTxnOps): one transaction's worth.
  [[nodiscard]] std::vector<EtcdOp> getsOf(std::span<const std::string> keys,
                                           std::size_t at) const {
    std::vector<EtcdOp> gets;
    for (std::size_t i = at; i < std::min(keys.size(), at + kTxnOps); ++i) {
      EtcdOp op;
      op.key = full(keys[i]);
      gets.push_back(std::move(op));
    }
    return gets;
  }

  // The store's own timeout for calls that take none: etcd's request deadline bounds each request,
  // a wait gets the same bound as a whole.
  static milliseconds timeout() { return std::chrono::seconds(300); }

  struct Presence {
    std::vector<bool> found;
    std::int64_t revision = 0;
  };

  // Which of `keys` exist, read in transactions of at most kTxnOps keys; the revision is the
  // first transaction's (watching from there misses nothing written after it).
  Result<Presence> presence(std::span<const std::string> keys) {
    Presence p;
    for (std::size_t at = 0; at < keys.size(); at += kTxnOps) {
      DTRUN_ASSIGN_OR_RETURN(auto txn, client_->txn({}, getsOf(keys, at), {}));
      if (p.revision == 0) {
        p.revision = txn.revision;
      }
      for (const auto& kvs : txn.gets) {
        p.found.push_back(!kvs.empty());
      }
    }
    return p;
  }

  // Until every key exists: read which are missing, watch the first missing one from the read's
  // revision, read again.
  Status waitFor(std::span<const std::string> keys, milliseconds timeout, const char* op) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      DTRUN_ASSIGN_OR_RETURN(auto p, presence(keys));
      const auto missing = std::find(p.found.begin(), p.found.end(), false);
      if (missing == p.found.end()) {
        return Status::ok();
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        return Status::timeout(std::string(op) + "(" + keysText(keys) + ") on " + peer() +
                               ": no reply within " + std::to_string(timeout.count()) + "ms");
      }
      const auto& key = keys[static_cast<std::size_t>(missing - p.found.begin())];
      DTRUN_TRY(client_
                    ->watch(full(key), false, p.revision + 1,
                            std::chrono::duration_cast<milliseconds>(deadline - now))
                    .status());
    }
  }

  // Read, compute, write if nothing changed in between; again if something did.
  Status update(std::string_view key,
                const std::function<Result<std::string>(const std::optional<std::string>&)>& next) {
    const std::string name = full(key);
    for (;;) {
      DTRUN_ASSIGN_OR_RETURN(auto kv, client_->get(name));
      DTRUN_ASSIGN_OR_RETURN(auto value,
                             next(kv ? std::optional<std::string>(kv->value) : std::nullopt));
      EtcdCompare unchanged;
      unchanged.key = name;
      unchanged.target =
          kv ? EtcdCompare::Target::kModRevision : EtcdCompare::Target::kCreateRevision;
      unchanged.number = kv ? kv->modRevision : 0;
      DTRUN_ASSIGN_OR_RETURN(auto txn, write({unchanged}, {putOf(name, value)}, {}));
      if (txn.succeeded) {
        return Status::ok();
      }
    }
  }

  static EtcdOp putOf(std::string key, std::string_view value) {
    EtcdOp put;
    put.type = EtcdOp::Type::kPut;
    put.key = std::move(key);
    put.value = std::string(value);
    return put;
  }

  // A write's transaction, fenced when the store has a fence: its compare goes with the
  // others', a read of the fence key with the failure branch, and a failed transaction whose
  // fence no longer holds is kDenied (a failed compare of the caller's is its own to judge).
  Result<EtcdTxnResult> write(std::vector<EtcdCompare> compares, const std::vector<EtcdOp>& ops,
                              std::vector<EtcdOp> onFailure) {
    if (!fence_) {
      return client_->txn(compares, ops, onFailure);
    }
    EtcdCompare held;
    held.key = fence_->key;
    held.target = EtcdCompare::Target::kCreateRevision;
    held.number = fence_->createRevision;
    compares.push_back(std::move(held));
    EtcdOp read;
    read.key = fence_->key;
    onFailure.push_back(std::move(read));
    DTRUN_ASSIGN_OR_RETURN(auto txn, client_->txn(compares, ops, onFailure));
    if (txn.succeeded) {
      return txn;
    }
    const auto& leader = txn.gets.back();
    if (leader.empty() || leader.front().createRevision != fence_->createRevision) {
      return Status::error(Errc::kDenied,
                           fence_->lost + " (" + fence_->key + " is " +
                               (leader.empty() ? std::string("gone") : "another's now") +
                               "): its write was not made");
    }
    txn.gets.pop_back();
    return txn;
  }

  std::shared_ptr<EtcdClient> client_;
  std::string prefix_;
  std::string jobNamespace_;  // "dtrun/<run id>/", the part of a key that prefix_ already says
  std::optional<EtcdFence> fence_;
  std::string id_;
  std::uint64_t pushes_ = 0;
};

}  // namespace

Result<std::unique_ptr<Store>> makeEtcdStore(std::shared_ptr<EtcdClient> client, std::string prefix,
                                             std::optional<EtcdFence> fence) {
  if (!client) {
    return Status::invalidArgument("makeEtcdStore: no etcd client");
  }
  return std::unique_ptr<Store>(
      std::make_unique<EtcdStore>(std::move(client), std::move(prefix), std::move(fence)));
}

}  // namespace dtrun::rdzv
