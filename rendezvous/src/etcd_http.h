// One HTTP/1.1 POST to one etcd endpoint (its v3 JSON gateway), plain or TLS, with a deadline:
// the whole reply, or the reply's body as it streams (a watch, a lease keep-alive).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "dtrun/common.h"

namespace dtrun::rdzv::detail {

struct EtcdTls {
  std::string caFile;
  std::string certFile;
  std::string keyFile;
};

class EtcdHttp {
 public:
  using Clock = std::chrono::steady_clock;
  // Reads the CA and the client certificate now (tls.caFile empty: plain HTTP): a file that
  // cannot be read or parsed is kInvalidArgument naming it.
  static Result<std::unique_ptr<EtcdHttp>> create(const EtcdTls& tls);
  EtcdHttp(const EtcdHttp&) = delete;
  EtcdHttp& operator=(const EtcdHttp&) = delete;
  EtcdHttp(EtcdHttp&&) = delete;
  EtcdHttp& operator=(EtcdHttp&&) = delete;
  ~EtcdHttp();

  // The reply's status and body. Failures to connect, to shake hands or to read are
  // kConnection (kDenied when the peer's certificate or ours was refused), kTimeout past the
  // deadline. Thread-safe: each call has its own connection.
  struct Reply {
    unsigned status = 0;
    std::string body;
  };
  Result<Reply> post(const std::string& endpoint, std::string_view path, std::string_view body,
                     const std::string& authorization, Clock::time_point deadline) const;

  // Like post, but hands the body to `onBody` as it grows (the whole body so far, each time
  // more arrived) until onBody returns true (done), the reply ends, the deadline passes (kOk: the
  // caller sees what it has) or `cancel` is set (checked every 200 ms: kCancelled).
  Status stream(const std::string& endpoint, std::string_view path, std::string_view body,
                const std::string& authorization, Clock::time_point deadline,
                const std::atomic<bool>* cancel,
                const std::function<bool(unsigned status, const std::string& body)>& onBody) const;

 private:
  struct Impl;
  explicit EtcdHttp(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrun::rdzv::detail
