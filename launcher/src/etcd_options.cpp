#include "etcd_options.h"

#include <array>

#include "text.h"
#include "value_parsers.h"

namespace dtrun::launcher {
namespace {

using text::isDigits;
using text::parseInt;
using text::split;
using text::trim;

constexpr std::array kConfKeys = {"prefix", "etcd_prefix", "protocol", "cacert",   "cert",
                                  "key",    "user",        "password", "lease_ttl"};

Status confError(const std::string& key, const std::string& problem) {
  return Status::invalidArgument("--rdzv_conf " + key + ": " + problem);
}

// One client URL: "host:port", "[v6]:port", with or without http(s)://; https asks for TLS.
Result<std::string> parseEtcdEndpoint(std::string_view text, bool& https) {
  std::string_view rest = trim(text);
  if (rest.starts_with("https://")) {
    https = true;
    rest.remove_prefix(8);
  } else if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  }
  while (rest.ends_with('/')) {
    rest.remove_suffix(1);
  }
  const auto endpoint = parseEndpoint(rest);
  if (rest.empty() || !endpoint || !endpoint->port || *endpoint->port == 0) {
    return Status::invalidArgument(
        "--rdzv_endpoint: etcd's client URLs are host:port[,host:port...] (e.g. "
        "127.0.0.1:2379), got '" +
        std::string(text) + "'");
  }
  return std::string(rest);
}

}  // namespace

bool isEtcdBackend(std::string_view backend) { return backend == "etcd" || backend == "etcd-v3"; }

bool isEtcdConfKey(std::string_view key) {
  for (const auto* known : kConfKeys) {
    if (key == known) {
      return true;
    }
  }
  return false;
}

Result<agent::EtcdRendezvous> resolveEtcd(
    const std::string& endpoints, const std::vector<std::pair<std::string, std::string>>& conf,
    const std::string& runId, const std::string& passwordFromEnv) {
  agent::EtcdRendezvous etcd;
  bool https = false;
  for (const auto item :
       trim(endpoints).empty() ? std::vector<std::string_view>() : split(endpoints, ',')) {
    DTRUN_ASSIGN_OR_RETURN(auto endpoint, parseEtcdEndpoint(item, https));
    etcd.endpoints.push_back(std::move(endpoint));
  }
  if (etcd.endpoints.empty()) {
    return Status::invalidArgument(
        "--rdzv_endpoint: the etcd backend needs etcd's client URLs, e.g. "
        "--rdzv_endpoint=127.0.0.1:2379 (several joined by commas)");
  }
  std::string prefix = "/dtrun";
  etcd.password = passwordFromEnv;
  for (const auto& [key, value] : conf) {
    if (key == "prefix" || key == "etcd_prefix") {
      if (value.empty() || value.find_first_of(" \t\n") != std::string::npos) {
        return confError(key,
                         "expects a key prefix without spaces, like /dtrun, got '" + value + "'");
      }
      prefix = value;
    } else if (key == "protocol") {
      if (value != "http" && value != "https") {
        return confError(key, "expects http or https, got '" + value + "'");
      }
      https = https || value == "https";
    } else if (key == "cacert") {
      etcd.caFile = value;
    } else if (key == "cert") {
      etcd.certFile = value;
    } else if (key == "key") {
      etcd.keyFile = value;
    } else if (key == "user") {
      etcd.user = value;
    } else if (key == "password") {
      etcd.password = value;
    } else if (key == "lease_ttl") {
      const auto n = isDigits(value) ? parseInt(value) : std::nullopt;
      if (!n || *n < 1 || *n > 3600) {
        return confError(key, "expects whole seconds from 1 to 3600, got '" + value + "'");
      }
      etcd.leaseTtl = std::chrono::seconds(*n);
    }
  }
  if (etcd.certFile.empty() != etcd.keyFile.empty()) {
    return Status::invalidArgument(
        "--rdzv_conf: cert and key go together (the client certificate and its private key)");
  }
  if ((https || !etcd.certFile.empty()) && etcd.caFile.empty()) {
    return Status::invalidArgument(
        "--rdzv_conf: TLS to etcd needs cacert=<the CA file that signed etcd's certificate>");
  }
  if (!etcd.password.empty() && etcd.user.empty()) {
    return Status::invalidArgument(
        "--rdzv_conf: a password needs user=<etcd user> (or unset DTRUN_ETCD_PASSWORD)");
  }
  etcd.prefix = prefix + (prefix.ends_with('/') ? "" : "/") + runId + "/";
  return etcd;
}

}  // namespace dtrun::launcher
