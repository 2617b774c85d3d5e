#include "session.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include <boost/asio/write.hpp>

#include "log.h"
#include "store_auth.h"

namespace dtrun::rdzv::detail {
namespace asio = boost::asio;
using boost::system::error_code;

namespace {
constexpr std::size_t kInitialBuffer = 4096;

// A WAIT_GET's answer: kStopWaiting, then the value (empty if the key went away meanwhile).
std::string stopWithValue(const std::string* value) {
  std::string reply(1, kStopWaiting);
  appendBytes(reply, value != nullptr ? *value : std::string_view{});
  return reply;
}

// "address:port" and the address alone ("" if the socket is not connected any more).
std::pair<std::string, std::string> describe(const asio::ip::tcp::endpoint& endpoint,
                                             const error_code& ec) {
  if (ec) {
    return {"unknown peer", ""};
  }
  auto address = endpoint.address();
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    address = asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
  }
  return {address.to_string() + ":" + std::to_string(endpoint.port()), address.to_string()};
}
}  // namespace

void ServerCore::add(const std::shared_ptr<Session>& session) {
  sessions_.emplace(session->id(), session.get());
}

void ServerCore::remove(ClientId id) {
  sessions_.erase(id);
  kv_.dropClient(id);
}

void ServerCore::closeAll() {
  // close() calls remove(), which edits the map: close a snapshot.
  std::vector<Session*> all;
  all.reserve(sessions_.size());
  for (auto& [id, session] : sessions_) {
    all.push_back(session);
  }
  for (Session* session : all) {
    session->close("server stopping", false);
  }
}

void ServerCore::onWaitReleased(ClientId client) {
  const auto it = sessions_.find(client);
  if (it != sessions_.end()) {
    it->second->onWaitReleased();
  }
}

void ServerCore::onWatchEvent(ClientId client, std::string_view event) {
  const auto it = sessions_.find(client);
  if (it != sessions_.end()) {
    it->second->notify(event);
  }
}

Session::Session(asio::ip::tcp::socket socket, ClientId id, ServerCore& core)
    : socket_(std::move(socket)), id_(id), core_(core) {
  error_code ec;
  std::tie(peer_, peerHost_) = describe(socket_.remote_endpoint(ec), ec);
  localHost_ = describe(socket_.local_endpoint(ec), ec).second;
  in_.resize(kInitialBuffer);
}

void Session::start() {
  log::rdzv().debug("client {} connected from {}", id_, peer_);
  error_code ec;
  socket_.non_blocking(true, ec);  // flush() writes directly and must never block the loop
  readSome();
}

void Session::readSome() {
  // Grows only with bytes that arrived (never to a length the client merely announced), so a
  // header claiming a large value costs the server nothing until the value's bytes come.
  if (inSize_ == in_.size()) {
    in_.resize(std::min(in_.size() * 2, core_.limits().maxRequestBytes + 1));
  }
  socket_.async_read_some(
      asio::buffer(in_.data() + inSize_, in_.size() - inSize_),
      [self = shared_from_this()](const error_code& ec, std::size_t n) { self->onRead(ec, n); });
}

void Session::onRead(const error_code& ec, std::size_t n) {
  if (closed_) {
    return;
  }
  if (ec) {
    const bool quiet = ec == asio::error::eof || ec == asio::error::connection_reset ||
                       ec == asio::error::operation_aborted;
    close(quiet ? "disconnected" : "read failed: " + ec.message(), !quiet);
    return;
  }
  inSize_ += n;
  if (handleInput()) {
    readSome();
  }
}

bool Session::handleInput() {
  try {
    while (true) {
      if (!processInput()) {
        return false;
      }
      // A batch that filled the backlog paused; if its replies then went out at once, go on.
      if (!paused_ || backlog() > core_.connectionLimits().maxReplyBacklog) {
        break;
      }
      unpause();
    }
  } catch (const std::exception& e) {
    close(std::string("internal error: ") + e.what(), true);
    return false;
  }
  if (paused_ && !pauseLogged_) {
    pauseLogged_ = true;
    log::rdzv().warn(
        "client {} ({}) is not reading its replies: {} bytes unread, over the limit of {} "
        "(--max-reply-backlog); its requests wait until it catches up",
        id_, peer_, backlog(), core_.connectionLimits().maxReplyBacklog);
  }
  return !paused_;
}

void Session::unpause() { paused_ = false; }

void Session::resumeIfDrained() {
  if (closed_ || backlog() > core_.connectionLimits().maxReplyBacklog) {
    return;
  }
  notifiedOverLimit_ = 0;
  if (!paused_) {
    return;
  }
  unpause();
  if (handleInput()) {
    readSome();
  }
}

bool Session::processInput() {
  std::size_t offset = 0;
  dispatching_ = true;
  while (offset < inSize_ && inSize_ - offset >= pendingNeed_) {
    if (backlog() > core_.connectionLimits().maxReplyBacklog) {
      paused_ = true;  // the rest stays in in_ until the client reads what it was sent
      break;
    }
    const std::string_view input(in_.data() + offset, inSize_ - offset);
    if (!dialect_) {
      switch (detectDialect(input, core_.limits())) {
        case DialectGuess::kNeedMore:
          break;
        case DialectGuess::kLegacy:
          dialect_ = Dialect::kLegacy;
          break;
        case DialectGuess::kV2:
          dialect_ = Dialect::kV2;
          break;
        case DialectGuess::kReject:
          close(
              "first request is neither VALIDATE with the right magic nor a sane torch<=2.0 "
              "request",
              true);
          return false;
      }
      if (!dialect_) {
        break;
      }
    }
    const ParseOutcome outcome = parseRequest(*dialect_, input, core_.limits(), request_);
    if (outcome.status == ParseStatus::kError) {
      close(outcome.error, true);
      return false;
    }
    if (outcome.status == ParseStatus::kNeedMore) {
      pendingNeed_ = outcome.needed;
      break;
    }
    pendingNeed_ = 0;
    if (!dispatch(request_)) {
      return false;
    }
    offset += outcome.consumed;
  }
  dispatching_ = false;
  if (offset > 0) {
    std::memmove(in_.data(), in_.data() + offset, inSize_ - offset);
    inSize_ -= offset;
  }
  if (inSize_ == 0 && in_.size() > kInitialBuffer) {
    in_.assign(kInitialBuffer, 0);  // give a large request's memory back
  }
  flush();
  return true;
}

bool Session::admitted() {
  if (authenticated_ || core_.token().empty()) {
    return true;
  }
  // A client on the store's own host (its agent's workers), or on a host whose agent proved the
  // token: PyTorch's clients cannot prove it themselves.
  if (!peerHost_.empty() && (peerHost_ == localHost_ || core_.hostAdmitted(peerHost_))) {
    authenticated_ = true;
    return true;
  }
  return false;
}

bool Session::authenticate(const Request& request) {
  if (core_.token().empty()) {
    close(
        "sent a token handshake, but this store has no token: remove DTRUN_STORE_TOKEN "
        "(or --rdzv_conf token) on the client, or give the store the same token",
        true);
    return false;
  }
  if (request.op == Op::kAuthChallenge) {
    clientNonce_ = std::string(request.proof);
    serverNonce_ = randomNonce();
    std::string reply;
    appendBytes(reply, serverNonce_);
    send(reply);
    return true;
  }
  if (serverNonce_.empty() ||
      !proofMatches(request.proof, core_.token(), serverNonce_, clientNonce_)) {
    send(std::string(1, kAuthRefused));
    flush();
    close(
        "refused: wrong store token (the client's DTRUN_STORE_TOKEN or --rdzv_conf token "
        "differs from the store's)",
        true);
    return false;
  }
  serverNonce_.clear();  // one proof per challenge: a replay needs a nonce that is gone
  authenticated_ = true;
  core_.admitHost(peerHost_);
  send(std::string(1, kAuthAccepted));
  return true;
}

void Session::onWaitReleased() {
  if (!waitGetKey_) {
    notify(std::string_view(&kStopWaiting, 1));
    return;
  }
  const std::string reply = stopWithValue(core_.kv().get(*waitGetKey_));
  waitGetKey_.reset();
  notify(reply);
}

bool Session::waitGet(std::string_view key) {
  KvState& kv = core_.kv();
  if (kv.waiting(id_)) {
    close("WAIT_GET while another wait of this connection is pending", true);
    return false;
  }
  if (!kv.wait(id_, {key})) {
    waitGetKey_.emplace(key);
    return true;
  }
  send(stopWithValue(kv.get(key)));
  return true;
}

bool Session::dispatch(const Request& request) {
  const bool handshake = request.op == Op::kValidate || request.op == Op::kPing ||
                         request.op == Op::kAuthChallenge || request.op == Op::kAuthProof;
  if (!handshake && !admitted()) {
    close("refused " + std::string(opName(request.op)) +
              ": this store requires a token and the client did not prove it (dtrun clients: set "
              "DTRUN_STORE_TOKEN or --rdzv_conf token; PyTorch clients are served only from hosts "
              "whose dtrun agent joined with the token)",
          true);
    return false;
  }
  KvState& kv = core_.kv();
  std::string& reply = scratch_;
  reply.clear();
  switch (request.op) {
    case Op::kAuthChallenge:
    case Op::kAuthProof:
      return authenticate(request);
    case Op::kValidate:
      if (request.word != kValidationMagic) {
        close("VALIDATE with a wrong magic number", true);
        return false;
      }
      return true;
    case Op::kSet:
      kv.set(request.key, request.value);
      return true;
    case Op::kCompareSet:
      appendBytes(reply, kv.compareSet(request.key, request.value, request.desired));
      break;
    case Op::kGet: {
      // Clients WAIT before GET; a missing key answers empty bytes, as upstream's libuv server.
      const std::string* value = kv.get(request.key);
      appendBytes(reply, value != nullptr ? *value : std::string_view{});
      break;
    }
    case Op::kAdd: {
      auto sum = kv.add(request.key, request.integer);
      if (!sum.isOk()) {
        close(sum.status().message(), true);
        return false;
      }
      appendI64(reply, sum.value());
      break;
    }
    case Op::kCheck:
      reply.push_back(kv.check(request.keys) ? kCheckReady : kCheckNotReady);
      break;
    case Op::kWaitGet:
      return waitGet(request.key);
    case Op::kWait:
      if (waitGetKey_) {
        close("WAIT while a WAIT_GET of this connection is pending", true);
        return false;
      }
      if (kv.wait(id_, request.keys)) {
        reply.push_back(kStopWaiting);
      }
      break;
    case Op::kNumKeys:
      appendI64(reply, static_cast<std::int64_t>(kv.numKeys()));
      break;
    case Op::kWatchKey:
      kv.watch(id_, request.key);
      reply.push_back(static_cast<char>(WatchEvent::kRegistered));
      break;
    case Op::kDeleteKey:
      appendI64(reply, kv.deleteKey(request.key) ? 1 : 0);
      break;
    case Op::kAppend:
      kv.append(request.key, request.value);
      return true;
    case Op::kMultiGet:
      for (const auto key : request.keys) {
        const std::string* value = kv.get(key);
        appendBytes(reply, value != nullptr ? *value : std::string_view{});
      }
      break;
    case Op::kMultiSet:
      for (std::size_t i = 0; i < request.keys.size(); ++i) {
        kv.set(request.keys[i], request.values[i]);
      }
      return true;
    case Op::kCancelWait:
      static_cast<void>(kv.cancelWaits(id_));
      waitGetKey_.reset();
      reply.push_back(kWaitCanceled);
      break;
    case Op::kPing:
      appendU32(reply, request.word);
      break;
    case Op::kQueuePush:
      kv.queuePush(request.key, request.value);
      return true;
    case Op::kQueuePop: {
      std::string value;
      const std::size_t length = kv.queuePop(request.key, value);
      appendI64(reply, static_cast<std::int64_t>(length));
      if (length > 0) {
        appendBytes(reply, value);
      }
      break;
    }
    case Op::kQueueLen:
      appendI64(reply, static_cast<std::int64_t>(kv.queueLen(request.key)));
      break;
    case Op::kListKeys:
      appendI64(reply, static_cast<std::int64_t>(kv.numKeys()));
      kv.forEachKey([&reply](const std::string& key) { appendBytes(reply, key); });
      break;
    case Op::kBarrier: {
      if (waitGetKey_) {
        close("BARRIER while a WAIT_GET of this connection is pending", true);
        return false;
      }
      auto released = kv.barrier(id_, request.key, request.integer);
      if (!released.isOk()) {
        close("BARRIER: " + released.status().message(), true);
        return false;
      }
      if (released.value()) {
        reply.push_back(kStopWaiting);
      }
      break;
    }
  }
  if (!reply.empty()) {
    send(reply);
  }
  return true;
}

void Session::send(std::string_view bytes) {
  if (closed_) {
    return;
  }
  outPending_.append(bytes);
  if (!dispatching_) {
    flush();
  }
}

void Session::notify(std::string_view bytes) {
  if (closed_) {
    return;
  }
  const std::size_t limit = core_.connectionLimits().maxReplyBacklog;
  if (backlog() + bytes.size() > limit) {
    notifiedOverLimit_ += bytes.size();
    if (notifiedOverLimit_ > limit) {
      close("slow client dropped: " + std::to_string(backlog() + bytes.size()) +
                " bytes of unread replies and events, over the limit of " + std::to_string(limit) +
                " (--max-reply-backlog) twice",
            true);
      return;
    }
  }
  send(bytes);
}

void Session::flush() {
  if (writing_ || outPending_.empty() || closed_) {
    return;
  }
  // Replies are small and the socket buffer is almost always free: send directly, and leave
  // only what did not fit to an asynchronous write (saves a completion handler per reply).
  error_code sendError;
  const std::size_t sent = socket_.write_some(asio::buffer(outPending_), sendError);
  if (sendError && sendError != asio::error::would_block && sendError != asio::error::try_again) {
    close("write failed: " + sendError.message(),
          sendError != asio::error::broken_pipe && sendError != asio::error::connection_reset);
    return;
  }
  if (sent == outPending_.size()) {
    outPending_.clear();
    return;
  }
  outPending_.erase(0, sent);
  writing_ = true;
  outWriting_.clear();
  std::swap(outWriting_, outPending_);
  asio::async_write(socket_, asio::buffer(outWriting_),
                    [self = shared_from_this()](const error_code& ec, std::size_t) {
                      self->writing_ = false;
                      if (self->closed_) {
                        return;
                      }
                      if (ec) {
                        self->close(
                            "write failed: " + ec.message(),
                            ec != asio::error::broken_pipe && ec != asio::error::connection_reset);
                        return;
                      }
                      self->flush();
                      self->resumeIfDrained();
                    });
}

void Session::close(std::string_view reason, bool error) {
  if (closed_) {
    return;
  }
  closed_ = true;
  if (error) {
    log::rdzv().warn("closing client {} ({}): {}", id_, peer_, reason);
  } else {
    log::rdzv().debug("closing client {} ({}): {}", id_, peer_, reason);
  }
  error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  core_.remove(id_);
}

}  // namespace dtrun::rdzv::detail
