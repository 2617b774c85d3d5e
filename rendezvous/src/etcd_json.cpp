#include "etcd_json.h"

#include <optional>
#include <string>

#include <openssl/evp.h>

namespace dtrun::rdzv::detail {
namespace {

using nlohmann::json;

std::optional<std::string> unbase64(std::string_view in) {
  if (in.size() % 4 != 0) {
    return std::nullopt;
  }
  std::string out(3 * in.size() / 4, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  if (n < 0) {
    return std::nullopt;
  }
  std::size_t size = static_cast<std::size_t>(n);
  for (auto it = in.rbegin(); it != in.rend() && *it == '='; ++it) {
    --size;  // EVP_DecodeBlock counts the padding as zero bytes
  }
  out.resize(size);
  return out;
}

// The first key after every key that starts with `prefix`: etcd's range_end for a prefix.
std::string prefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    auto& last = prefix.back();
    if (static_cast<unsigned char>(last) != 0xff) {
      last = static_cast<char>(static_cast<unsigned char>(last) + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

const char* targetName(EtcdCompare::Target t) {
  switch (t) {
    case EtcdCompare::Target::kVersion:
      return "VERSION";
    case EtcdCompare::Target::kCreateRevision:
      return "CREATE";
    case EtcdCompare::Target::kModRevision:
      return "MOD";
    case EtcdCompare::Target::kValue:
      return "VALUE";
    case EtcdCompare::Target::kLease:
      return "LEASE";
  }
  return "VERSION";
}

const char* opName(EtcdCompare::Op op) {
  switch (op) {
    case EtcdCompare::Op::kEqual:
      return "EQUAL";
    case EtcdCompare::Op::kNotEqual:
      return "NOT_EQUAL";
    case EtcdCompare::Op::kGreater:
      return "GREATER";
    case EtcdCompare::Op::kLess:
      return "LESS";
  }
  return "EQUAL";
}

}  // namespace

std::string base64(std::string_view in) {
  std::string out(4 * ((in.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::int64_t number(const json& j, const char* name) {
  if (!j.is_object() || !j.contains(name)) {
    return 0;  // proto3's JSON leaves zero values out
  }
  const json& v = j.at(name);
  if (v.is_string()) {
    return std::stoll(v.get<std::string>());
  }
  return v.is_number() ? v.get<std::int64_t>() : 0;
}

EtcdKeyValue keyValue(const json& j) {
  EtcdKeyValue kv;
  kv.key = unbase64(j.value("key", "")).value_or("");
  kv.value = unbase64(j.value("value", "")).value_or("");
  kv.createRevision = number(j, "create_revision");
  kv.modRevision = number(j, "mod_revision");
  kv.version = number(j, "version");
  kv.lease = number(j, "lease");
  return kv;
}

std::vector<EtcdKeyValue> keyValues(const json& j) {
  std::vector<EtcdKeyValue> kvs;
  if (j.is_object() && j.contains("kvs")) {
    for (const auto& kv : j.at("kvs")) {
      kvs.push_back(keyValue(kv));
    }
  }
  return kvs;
}

std::int64_t headerRevision(const json& j) {
  return j.is_object() && j.contains("header") ? number(j.at("header"), "revision") : 0;
}

json rangeRequest(std::string_view key, bool prefix) {
  json r = {{"key", base64(key)}};
  if (prefix) {
    r["range_end"] = base64(prefixEnd(std::string(key)));
  }
  return r;
}

json compareJson(const EtcdCompare& c) {
  json j = {{"key", base64(c.key)}, {"target", targetName(c.target)}, {"result", opName(c.op)}};
  switch (c.target) {
    case EtcdCompare::Target::kVersion:
      j["version"] = std::to_string(c.number);
      break;
    case EtcdCompare::Target::kCreateRevision:
      j["create_revision"] = std::to_string(c.number);
      break;
    case EtcdCompare::Target::kModRevision:
      j["mod_revision"] = std::to_string(c.number);
      break;
    case EtcdCompare::Target::kValue:
      j["value"] = base64(c.value);
      break;
    case EtcdCompare::Target::kLease:
      j["lease"] = std::to_string(c.number);
      break;
  }
  return j;
}

json opJson(const EtcdOp& op) {
  switch (op.type) {
    case EtcdOp::Type::kPut: {
      json put = {{"key", base64(op.key)}, {"value", base64(op.value)}};
      if (op.lease != 0) {
        put["lease"] = std::to_string(op.lease);
      }
      return {{"request_put", put}};
    }
    case EtcdOp::Type::kDelete:
      return {{"request_delete_range", rangeRequest(op.key, op.prefix)}};
    case EtcdOp::Type::kGet: {
      json range = rangeRequest(op.key, op.prefix);
      if (op.countOnly) {
        range["count_only"] = true;
      }
      return {{"request_range", range}};
    }
  }
  return {};
}

// etcd's own words for a failed call: {"error": "...", "code": N, "message": "..."}.
std::string etcdMessage(const std::string& body) {
  try {
    const json j = json::parse(body);
    if (j.is_object()) {
      const json& e = j.contains("error") && j.at("error").is_object() ? j.at("error") : j;
      if (e.contains("message") && e.at("message").is_string()) {
        return e.at("message").get<std::string>();
      }
      if (e.contains("error") && e.at("error").is_string()) {
        return e.at("error").get<std::string>();
      }
    }
  } catch (const json::exception&) {
  }
  return body.substr(0, 200);
}

bool isEtcdError(const std::string& body) {
  try {
    const json j = json::parse(body);
    return j.is_object() && j.contains("code") && j.at("code").is_number_integer() &&
           (j.contains("message") || j.contains("error"));
  } catch (const json::exception&) {
    return false;
  }
}

}  // namespace dtrun::rdzv::detail
