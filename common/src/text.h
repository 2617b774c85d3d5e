// Small text helpers shared by the launcher's and the scheduler's parsers and libdtrt (internal to
// dtrun). Pure functions over string_views: nothing allocates beyond the returned value.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrun::text {

// `text` without leading and trailing blanks (space, tab, CR, LF).
std::string_view trim(std::string_view text);

// Every piece between `separator`s, empty pieces included: split("a,,b", ',') = {"a", "", "b"};
// split("", ',') = {""}.
std::vector<std::string_view> split(std::string_view text, char separator);

// True for one or more ASCII digits and nothing else (no sign, no blanks).
bool isDigits(std::string_view text);

// A decimal integer, optionally signed and surrounded by blanks (as Python's int() takes it);
// nullopt when malformed or out of range.
std::optional<long long> parseInt(std::string_view text);

// The value of environment variable `name`, "" when it is unset. For code that never calls
// setenv while other threads read (libdtrt reads its variables once, at start).
std::string envText(const char* name);

// `text` with the value after each name that ends in "token" or "password" (any case) replaced
// by "<redacted>": DTRUN_STORE_TOKEN=, --rdzv_conf's token= and password=, DTRUN_ETCD_PASSWORD=,
// also as Python prints a dict ('HF_TOKEN': '...'); each value up to a blank, comma, quote, '}'
// or the line's end. What leaves a run in a bundle or a record passes through here.
std::string redactSecrets(std::string_view text);

}  // namespace dtrun::text
