// dtrun's fuzz targets: each takes one input of arbitrary bytes, drives a parser that faces
// untrusted text or bytes, and aborts (via assertInvariant) when a property the code promises
// breaks. libFuzzer harnesses (fuzz_main.cpp, built with -DDTRUN_FUZZ=ON under clang) call one
// each; the Catch2 replay test calls all of them on the seed corpus and on every input that
// once crashed (tests/fuzz/corpus/<target>/, tests/fuzz/regressions/<target>/). Pure functions
// of their input: no I/O, no globals that carry state from one input to the next.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dtrun::fuzz {

// The store's request decoder in both TCPStore dialects, as the server drives it: dialect
// detection, incremental parsing at every fragmentation, byte-exact re-encoding, and execution
// of each request against a KvState (the store's semantics, without sockets).
void storeRequest(const std::uint8_t* data, std::size_t size);

// dtrun's own records in the store (round_codec: keeper messages, settings, node records, round
// ends, assignments): every decoder on the input; what decodes must re-encode and decode equal.
void roundCodec(const std::uint8_t* data, std::size_t size);

// The launcher's value parsers: parseEndpoint, parseSignalNames, parseStreamSelection, and
// validate() on "name=value" lines (torchrun option dests, --rdzv_conf among them).
void launchOptions(const std::uint8_t* data, std::size_t size);

// The batch-scheduler parsers: SLURM host lists and count lists, and detect() over an
// environment (and PBS nodefile) taken from the input.
void hostlist(const std::uint8_t* data, std::size_t size);

struct Target {
  std::string_view name;  // also the corpus folder name
  void (*run)(const std::uint8_t* data, std::size_t size);
};
inline constexpr Target kTargets[] = {
    {"store_request", storeRequest},
    {"round_codec", roundCodec},
    {"launch_options", launchOptions},
    {"hostlist", hostlist},
};

// Prints `what` to stderr and aborts: libFuzzer and the replay test both report an abort.
[[noreturn]] void invariantBroken(std::string_view target, std::string_view what);
inline void assertInvariant(bool holds, std::string_view target, std::string_view what) {
  if (!holds) {
    invariantBroken(target, what);
  }
}

// A bad value must produce the one line the user reads: never empty, never several lines.
void assertOneLineError(std::string_view target, const std::string& message);

}  // namespace dtrun::fuzz
