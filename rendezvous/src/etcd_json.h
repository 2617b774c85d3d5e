// etcd's v3 JSON gateway, encoded and decoded: keys and values in base64, 64-bit numbers as JSON
// strings (proto3's JSON mapping), a transaction's compares and operations, etcd's error text.
// Pure functions over JSON; the client (etcd_client.cpp) posts and reads them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtrun/etcd.h"

namespace dtrun::rdzv::detail {

std::string base64(std::string_view in);

// A 64-bit field of a reply, as a JSON string or number; 0 when left out.
std::int64_t number(const nlohmann::json& j, const char* name);

EtcdKeyValue keyValue(const nlohmann::json& j);
// A range reply's "kvs" (none when it has none).
std::vector<EtcdKeyValue> keyValues(const nlohmann::json& j);
// The reply header's revision (0 when it has none).
std::int64_t headerRevision(const nlohmann::json& j);

// A range over `key`, or over every key starting with it when `prefix`.
nlohmann::json rangeRequest(std::string_view key, bool prefix);
// A transaction's compare and operation.
nlohmann::json compareJson(const EtcdCompare& c);
nlohmann::json opJson(const EtcdOp& op);

// etcd's own words for a failed call: {"error": "...", "code": N, "message": "..."}.
std::string etcdMessage(const std::string& body);

// True when the body is such an answer of etcd's gateway: a gRPC status carried over HTTP. It
// maps NOT_FOUND (a lease that expired) to HTTP 404, which is then etcd's answer, not a server
// without etcd's API.
bool isEtcdError(const std::string& body);

}  // namespace dtrun::rdzv::detail
