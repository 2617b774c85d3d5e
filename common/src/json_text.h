// JSON documents as text, for every writer of dtrun's (reports, error files, event logs, the
// round's records). Workers' output, arguments and host names are bytes, not UTF-8: nlohmann's
// plain dump() throws on the first bad byte and the whole document would be lost. Here a bad
// byte (or a character cut at a read boundary) becomes U+FFFD and the rest is kept.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace dtrun {

// `indent` < 0: one line; otherwise pretty-printed with that many spaces.
template <class Json>
std::string jsonText(const Json& document, int indent = -1) {
  return document.dump(indent, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

}  // namespace dtrun
