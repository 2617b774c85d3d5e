// Every operation of one ProcessGroup checked against check_values.h's expected results:
// collectives, barrier, p2p with tags, sub-groups, Work::wait timeouts.
// Part of dtrt_check_worker (one translation unit): header-only, internal to the worker.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrun/runtime.h"

#include "check_values.h"

namespace dtrt_check {

// ---- ops ------------------------------------------------------------------------------------

// How much of the matrix runs at the longest length (100003 elements, many pipelined segments):
// all of it, or in the short form (sanitizer trees, tests/support/test_form.h) one dtype per
// element size (u8, f16, f32, i64) with sum and max, the rest at the shorter lengths only. The
// segments' arithmetic depends on the element's size; the reduction kernels' code paths (vector
// loops and their tails) are all met at 1001.
enum class Form : std::uint8_t { kLong, kShort };

inline bool runsAtLength(Form form, std::size_t length, rt::DataType t,
                         std::optional<rt::ReduceOp> op) {
  constexpr std::size_t kLongLength = 100000;
  if (form == Form::kLong || length < kLongLength) {
    return true;
  }
  const bool sized = t == rt::DataType::kUInt8 || t == rt::DataType::kFloat16 ||
                     t == rt::DataType::kFloat32 || t == rt::DataType::kInt64;
  return sized && (!op || *op == rt::ReduceOp::kSum || *op == rt::ReduceOp::kMax);
}

// Runs every collective of one group against locally computed results.
class OpsChecker {
 public:
  OpsChecker(Reporter& report, rt::ProcessGroup& pg, std::string label, bool cuda,
             Form form = Form::kLong)
      : report_(report), pg_(pg), label_(std::move(label)), cuda_(cuda), form_(form) {}

  void runAll(const std::vector<std::size_t>& lengths,
              const std::vector<rt::DataType>& types = {kAllTypes.begin(), kAllTypes.end()}) {
    lengths_ = lengths;
    for (const rt::DataType t : types) {
      for (const rt::ReduceOp op : kAllOps) {
        check("all_reduce", t, op,
              [&](std::size_t n, std::size_t li) { return allReduce(t, op, n, li); });
      }
      for (const rt::ReduceOp op : kAllOps) {
        check("reduce", t, op, [&](std::size_t n, std::size_t li) { return reduce(t, op, n, li); });
      }
      check("broadcast", t, std::nullopt,
            [&](std::size_t n, std::size_t li) { return broadcast(t, n, li); });
      check("all_gather", t, std::nullopt,
            [&](std::size_t n, std::size_t li) { return allGather(t, n, li); });
      check("gather", t, std::nullopt,
            [&](std::size_t n, std::size_t li) { return gather(t, n, li); });
      check("scatter", t, std::nullopt,
            [&](std::size_t n, std::size_t li) { return scatter(t, n, li); });
      for (const rt::ReduceOp op : kAllOps) {
        check("reduce_scatter", t, op,
              [&](std::size_t n, std::size_t li) { return reduceScatter(t, op, n, li); });
      }
      check("all_to_all", t, std::nullopt,
            [&](std::size_t n, std::size_t li) { return allToAll(t, n, li); });
    }
  }

 private:
  using Body = std::function<std::string(std::size_t, std::size_t)>;

  // One PASS/FAIL/SKIP line for `what` over every length. A ConfigError for f16/bf16 means the
  // backend does not take that dtype: SKIP. Any other libdtrt error leaves the group unusable:
  // FAIL, and the process exits.
  void check(const std::string& what, rt::DataType t, std::optional<rt::ReduceOp> op,
             const Body& body) {
    std::string name = label_ + " " + what + " " + rt::dataTypeName(t);
    if (op) {
      name += std::string(" ") + rt::reduceOpName(*op);
    }
    std::string problems;
    for (std::size_t li = 0; li < lengths_.size(); ++li) {
      const std::size_t n = lengths_[li];
      if (!runsAtLength(form_, n, t, op)) {
        continue;
      }
      try {
        const std::string why = body(n, li);
        if (!why.empty()) {
          problems += (problems.empty() ? "" : "; ") + std::string("length ") + std::to_string(n) +
                      ": " + why;
        }
      } catch (const rt::ConfigError& e) {
        if (isHalf(t)) {
          report_.skip(name, std::string("ConfigError: ") + e.what());
          return;
        }
        problems += (problems.empty() ? "" : "; ") + std::string("length ") + std::to_string(n) +
                    ": ConfigError: " + e.what();
      } catch (const rt::Error& e) {
        report_.fail(name, "length " + std::to_string(n) + ": " + e.what());
        std::_Exit(1);  // the group may be broken: no destructors
      }
    }
    report_.expect(problems.empty(), name, problems);
  }

  [[nodiscard]] int size() const { return pg_.size(); }
  [[nodiscard]] int rank() const { return pg_.rank(); }
  std::uint64_t salt(std::size_t li, int extra) {
    return (++counter_ * 16) + li * 4096 + static_cast<std::uint64_t>(extra);
  }

  // expected[i] = op over ranks of valueAt(r, offset + i)
  std::vector<double> reduced(rt::DataType t, rt::ReduceOp op, std::uint64_t s, std::size_t n,
                              std::size_t offset) {
    std::vector<double> out(n);
    std::vector<double> x(static_cast<std::size_t>(size()));
    for (std::size_t i = 0; i < n; ++i) {
      for (int r = 0; r < size(); ++r) {
        x[static_cast<std::size_t>(r)] = valueAt(t, kindFor(op), s, r, offset + i);
      }
      out[i] = reduceValues(t, op, x);
    }
    return out;
  }

  std::string allReduce(rt::DataType t, rt::ReduceOp op, std::size_t n, std::size_t li) {
    const auto s = salt(li, 1);
    Mem m(t, n, cuda_);
    m.write(encodeAll(t, valuesOf(t, kindFor(op), s, rank(), n)));
    pg_.allReduce(m.buffer(), op);
    return mismatch(t, m.read(), reduced(t, op, s, n, 0), tolerance(t));
  }

  std::string reduce(rt::DataType t, rt::ReduceOp op, std::size_t n, std::size_t li) {
    const auto s = salt(li, 2);
    const int root =
        static_cast<int>((li + static_cast<std::size_t>(op)) % static_cast<std::size_t>(size()));
    Mem m(t, n, cuda_);
    m.write(encodeAll(t, valuesOf(t, kindFor(op), s, rank(), n)));
    pg_.reduce(m.buffer(), root, op);
    if (rank() != root) {
      return "";  // non-roots' buffers are unspecified
    }
    return mismatch(t, m.read(), reduced(t, op, s, n, 0), tolerance(t));
  }

  std::string broadcast(rt::DataType t, std::size_t n, std::size_t li) {
    std::string out;
    for (const int root : {0, size() - 1}) {
      const auto s = salt(li, 3);
      Mem m(t, n, cuda_);
      m.write(encodeAll(t, valuesOf(t, Kind::kWide, s, rank(), n)));
      pg_.broadcast(m.buffer(), root);
      const std::string why = mismatch(t, m.read(), valuesOf(t, Kind::kWide, s, root, n), 0);
      if (!why.empty()) {
        out += "root " + std::to_string(root) + ": " + why;
      }
    }
    return out;
  }

  std::vector<double> concatenated(rt::DataType t, std::uint64_t s, std::size_t n) {
    std::vector<double> all;
    for (int r = 0; r < size(); ++r) {
      const auto v = valuesOf(t, Kind::kWide, s, r, n);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  }

  std::string allGather(rt::DataType t, std::size_t n, std::size_t li) {
    const auto s = salt(li, 4);
    Mem in(t, n, cuda_);
    Mem out(t, n * static_cast<std::size_t>(size()), cuda_);
    in.write(encodeAll(t, valuesOf(t, Kind::kWide, s, rank(), n)));
    out.fill(std::byte{0xA5});
    pg_.allGather(in.buffer(), out.buffer());
    return mismatch(t, out.read(), concatenated(t, s, n), 0);
  }

  std::string gather(rt::DataType t, std::size_t n, std::size_t li) {
    const auto s = salt(li, 5);
    const int root = static_cast<int>(li % static_cast<std::size_t>(size()));
    Mem in(t, n, cuda_);
    Mem out(t, n * static_cast<std::size_t>(size()), cuda_);
    in.write(encodeAll(t, valuesOf(t, Kind::kWide, s, rank(), n)));
    out.fill(std::byte{0xA5});
    pg_.gather(in.buffer(), out.buffer(), root);
    return rank() == root ? mismatch(t, out.read(), concatenated(t, s, n), 0) : "";
  }

  std::string scatter(rt::DataType t, std::size_t n, std::size_t li) {
    const auto s = salt(li, 6);
    const int root = static_cast<int>((li + 1) % static_cast<std::size_t>(size()));
    const std::size_t total = n * static_cast<std::size_t>(size());
    Mem in(t, total, cuda_);
    Mem out(t, n, cuda_);
    in.write(encodeAll(t, valuesOf(t, Kind::kWide, s, rank(), total)));
    out.fill(std::byte{0xA5});
    pg_.scatter(in.buffer(), out.buffer(), root);
    // block r of the root's input
    return mismatch(t, out.read(),
                    valuesOf(t, Kind::kWide, s, root, n, static_cast<std::size_t>(rank()) * n), 0);
  }

  std::string reduceScatter(rt::DataType t, rt::ReduceOp op, std::size_t n, std::size_t li) {
    const auto s = salt(li, 7);
    const std::size_t total = n * static_cast<std::size_t>(size());
    Mem in(t, total, cuda_);
    Mem out(t, n, cuda_);
    in.write(encodeAll(t, valuesOf(t, kindFor(op), s, rank(), total)));
    out.fill(std::byte{0xA5});
    pg_.reduceScatter(in.buffer(), out.buffer(), op);
    return mismatch(t, out.read(), reduced(t, op, s, n, static_cast<std::size_t>(rank()) * n),
                    tolerance(t));
  }

  std::string allToAll(rt::DataType t, std::size_t n, std::size_t li) {
    // Rank r's input block j is valuesOf(r, offset j*n); rank r's output block j comes from rank
    // j's input block r.
    const auto s = salt(li, 8);
    const std::size_t total = n * static_cast<std::size_t>(size());
    Mem in(t, total, cuda_);
    Mem out(t, total, cuda_);
    in.write(encodeAll(t, valuesOf(t, Kind::kWide, s, rank(), total)));
    out.fill(std::byte{0xA5});
    pg_.allToAll(in.buffer(), out.buffer());
    std::vector<double> expected;
    for (int j = 0; j < size(); ++j) {
      const auto v = valuesOf(t, Kind::kWide, s, j, n, static_cast<std::size_t>(rank()) * n);
      expected.insert(expected.end(), v.begin(), v.end());
    }
    return mismatch(t, out.read(), expected, 0);
  }

  Reporter& report_;
  rt::ProcessGroup& pg_;
  std::string label_;
  bool cuda_;
  Form form_;
  std::vector<std::size_t> lengths_;
  std::uint64_t counter_ = 0;
};

// Runs `body`; a libdtrt error is a FAIL, and (unless ConfigError) ends the process, because the
// group may be broken.
inline void guarded(Reporter& report, const std::string& name, const std::function<void()>& body) {
  try {
    body();
  } catch (const rt::ConfigError& e) {
    report.fail(name, std::string("ConfigError: ") + e.what());
  } catch (const rt::Error& e) {
    report.fail(name, e.what());
    std::_Exit(1);  // the group may be broken: no destructors
  }
}

inline void checkBarrier(Reporter& report, rt::ProcessGroup& pg, const std::string& label) {
  guarded(report, label + " barrier", [&] {
    pg.barrier();
    // The last rank arrives 300 ms late: nobody may leave before it arrived.
    const auto start = Clock::now();
    if (pg.rank() == pg.size() - 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    pg.barrier();
    const double waited = secondsSince(start);
    report.expect(waited >= 0.25, label + " barrier waits for the last rank",
                  "left the barrier after " + std::to_string(waited) +
                      " s although the last rank arrived after 0.3 s");
  });
}

// Blocking and non-blocking p2p between every pair, with tags (size >= 2).
inline void checkP2p(Reporter& report, rt::ProcessGroup& pg, const std::string& label, bool cuda,
                     bool tags) {
  const int n = pg.size();
  const int me = pg.rank();
  if (n < 2) {
    report.skip(label + " p2p", "needs 2 ranks");
    return;
  }
  const std::array<rt::DataType, 4> types = {rt::DataType::kFloat32, rt::DataType::kUInt8,
                                             rt::DataType::kInt64, rt::DataType::kBFloat16};
  // Blocking: rank 0 sends to every rank (tag = rank), every rank answers (tag = 1000 + rank).
  for (const rt::DataType t : types) {
    std::string problems;
    guarded(report, label + " p2p blocking " + rt::dataTypeName(t), [&] {
      for (const std::size_t len : {std::size_t{1}, std::size_t{1001}, std::size_t{100003}}) {
        const std::uint64_t s = 900 + len;
        const int tagOut = tags ? 1 : 0;
        const int tagBack = tags ? 1000 : 0;
        if (me == 0) {
          for (int r = 1; r < n; ++r) {
            Mem m(t, len, cuda);
            m.write(encodeAll(t, valuesOf(t, Kind::kWide, s, r, len)));
            pg.send(m.buffer(), r, tagOut * r);
          }
          for (int r = 1; r < n; ++r) {
            Mem m(t, len, cuda);
            m.fill(std::byte{0x5A});
            pg.recv(m.buffer(), r, tagBack + tagOut * r);
            const auto why = mismatch(t, m.read(), valuesOf(t, Kind::kWide, s + 1, r, len), 0);
            if (!why.empty()) {
              problems += "from rank " + std::to_string(r) + " length " + std::to_string(len) +
                          ": " + why + "; ";
            }
          }
        } else {
          Mem m(t, len, cuda);
          m.fill(std::byte{0x5A});
          pg.recv(m.buffer(), 0, tagOut * me);
          const auto why = mismatch(t, m.read(), valuesOf(t, Kind::kWide, s, me, len), 0);
          if (!why.empty()) {
            problems += "from rank 0 length " + std::to_string(len) + ": " + why + "; ";
          }
          m.write(encodeAll(t, valuesOf(t, Kind::kWide, s + 1, me, len)));
          pg.send(m.buffer(), 0, tagBack + tagOut * me);
        }
      }
      report.expect(problems.empty(), label + " p2p blocking " + rt::dataTypeName(t), problems);
    });
  }
  if (!tags) {
    return;
  }
  // Non-blocking, every pair at once: to each peer two messages on tags 1 and 2 and two on tag 3
  // (same tag: they must arrive in order); the receiver posts tag 2 before tag 1.
  for (const std::size_t len : {std::size_t{7}, std::size_t{100003}}) {
    const std::string name = label + " p2p isend/irecv tags, length " + std::to_string(len);
    guarded(report, name, [&] {
      const rt::DataType t = rt::DataType::kInt32;
      const std::array<int, 4> sendTags = {1, 2, 3, 3};
      const std::array<int, 4> recvTags = {2, 1, 3, 3};
      const std::array<int, 4> recvMeaning = {1, 0, 2, 3};  // which sent message each recv gets
      std::vector<std::unique_ptr<Mem>> sends;
      std::vector<std::unique_ptr<Mem>> recvs;
      std::vector<rt::Work> work;
      std::vector<std::pair<int, int>> recvFrom;  // (peer, message index)
      for (int peer = 0; peer < n; ++peer) {
        if (peer == me) {
          continue;
        }
        for (std::size_t k = 0; k < recvTags.size(); ++k) {
          recvs.push_back(std::make_unique<Mem>(t, len, cuda));
          recvs.back()->fill(std::byte{0x5A});
          work.push_back(pg.irecv(recvs.back()->buffer(), peer, recvTags.at(k)));
          recvFrom.emplace_back(peer, recvMeaning.at(k));
        }
      }
      for (int peer = 0; peer < n; ++peer) {
        if (peer == me) {
          continue;
        }
        for (std::size_t k = 0; k < sendTags.size(); ++k) {
          sends.push_back(std::make_unique<Mem>(t, len, cuda));
          sends.back()->write(encodeAll(
              t,
              valuesOf(t, Kind::kWide, 5000 + k + 10 * static_cast<std::size_t>(peer), me, len)));
          work.push_back(pg.isend(sends.back()->buffer(), peer, sendTags.at(k)));
        }
      }
      bool allCompleted = true;
      for (auto& w : work) {
        w.wait();
        allCompleted = allCompleted && w.isCompleted();
      }
      std::string problems;
      for (std::size_t k = 0; k < recvs.size(); ++k) {
        const auto [peer, msg] = recvFrom[k];
        const auto why = mismatch(
            t, recvs[k]->read(),
            valuesOf(t, Kind::kWide,
                     5000 + static_cast<std::size_t>(msg) + 10 * static_cast<std::size_t>(me), peer,
                     len),
            0);
        if (!why.empty()) {
          problems += "message " + std::to_string(msg) + " from rank " + std::to_string(peer) +
                      ": " + why + "; ";
        }
      }
      if (!allCompleted) {
        problems += "isCompleted() is false after wait(); ";
      }
      report.expect(problems.empty(), name, problems);
    });
  }
}

// Work::wait(timeout) on an irecv nobody sends: TimeoutError naming the peer, promptly. Runs on
// a fresh sub-group {0, 1}, which may be unusable afterwards; the parent group must not be.
inline void checkWaitTimeout(Reporter& report, rt::ProcessGroup& world, const std::string& label,
                             bool cuda) {
  if (world.size() < 2) {
    return;
  }
  const std::string name = label + " p2p wait(300 ms) on a pending irecv";
  guarded(report, name, [&] {
    auto pair = world.newGroup({0, 1});
    if (world.rank() == 0) {
      Mem m(rt::DataType::kFloat64, 3, cuda);
      rt::Work w = pair->irecv(m.buffer(), 1, 77);
      report.expect(!w.isCompleted(), label + " p2p isCompleted() false before the peer sent",
                    "true");
      const auto start = Clock::now();
      std::string why;
      try {
        w.wait(std::chrono::milliseconds(300));
        why = "wait(300 ms) returned although rank 1 never sends";
      } catch (const rt::TimeoutError& e) {
        const double took = secondsSince(start);
        if (took < 0.25 || took > 3) {
          why = "TimeoutError after " + std::to_string(took) + " s, expected about 0.3 s";
        } else if (!contains(e.what(), "rank 1")) {
          why = std::string("TimeoutError does not name rank 1: ") + e.what();
        }
      } catch (const rt::Error& e) {
        why = std::string("expected TimeoutError, got: ") + e.what();
      }
      report.expect(why.empty(), name + " throws TimeoutError naming rank 1", why);
    }
    world.barrier();  // rank 1 stays until rank 0 checked; then both drop the pair group
  });
  guarded(report, label + " parent group usable after a sub-group's timeout",
          [&] { world.barrier(); });
}

// A sub-group of `ranks` (in that order): membership, rank/size, a few collectives, p2p, then the
// parent group still works.
inline void checkSubGroup(Reporter& report, rt::ProcessGroup& world, const std::vector<int>& ranks,
                          const std::string& label, bool cuda) {
  std::string list;
  for (const int r : ranks) {
    list += (list.empty() ? "" : ",") + std::to_string(r);
  }
  const std::string name = label + " new_group{" + list + "}";
  guarded(report, name, [&] {
    auto sub = world.newGroup(ranks);
    const auto pos = std::find(ranks.begin(), ranks.end(), world.rank());
    if (pos == ranks.end()) {
      report.expect(sub == nullptr, name + " non-member gets nullptr", "got a group");
    } else if (sub == nullptr) {
      report.fail(name + " member gets a group", "got nullptr");
    } else {
      const int expectRank = static_cast<int>(pos - ranks.begin());
      report.expect(sub->rank() == expectRank && sub->size() == static_cast<int>(ranks.size()),
                    name + " rank/size",
                    "rank " + std::to_string(sub->rank()) + " size " + std::to_string(sub->size()) +
                        ", expected rank " + std::to_string(expectRank) + " size " +
                        std::to_string(ranks.size()));
      OpsChecker ops(report, *sub, name, cuda);
      ops.runAll({1, 1001}, {rt::DataType::kFloat32, rt::DataType::kInt64});
      checkP2p(report, *sub, name, cuda, !cuda);
    }
    // The parent group after the sub-group's traffic.
    Mem m(rt::DataType::kInt64, 5, cuda);
    m.write(encodeAll(rt::DataType::kInt64, std::vector<double>(5, world.rank() + 1)));
    world.allReduce(m.buffer());
    const double n = world.size();
    report.expect(
        mismatch(rt::DataType::kInt64, m.read(), std::vector<double>(5, n * (n + 1) / 2), 0)
            .empty(),
        name + " parent group still works", "all_reduce after the sub-group is wrong");
  });
}

#ifdef DTRUN_HAVE_NCCL
inline bool selectCudaDevice(Reporter& report, int localRank) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    report.skip("nccl", "no CUDA device");
    return false;
  }
  cudaSetDevice(localRank % count);
  return true;
}
#endif

// Every check of one rank's group on `backend`: creation, barrier, every collective x dtype x
// ReduceOp at kLengths, p2p (with tags off CUDA), sub-groups, Work::wait timeouts. The worker's
// `ops` mode runs it per process; tests/runtime runs it with ranks as threads of one process.
inline int checkGroup(Reporter& report, const rt::Context& ctx, rt::Backend backend,
                      Form form = Form::kLong) {
  const bool cuda = backend == rt::Backend::kNccl;
  const std::string backendName = rt::backendName(backend);
  std::unique_ptr<rt::ProcessGroup> pg;
  const std::string label = backendName + " n=" + std::to_string(ctx.worldSize);
  guarded(report, label + " create", [&] {
    const auto start = Clock::now();
    pg = rt::ProcessGroup::create(ctx, backend);
    report.expect(pg->rank() == ctx.rank && pg->size() == ctx.worldSize && pg->backend() == backend,
                  label + " create: rank, size, backend",
                  "rank " + std::to_string(pg->rank()) + " size " + std::to_string(pg->size()));
    std::printf("INFO %s create took %.3f s\n", label.c_str(), secondsSince(start));
  });
  if (backend == rt::Backend::kGloo) {
    struct sigaction pipe {};
    (void)::sigaction(SIGPIPE, nullptr, &pipe);
    report.expect(pipe.sa_handler == SIG_IGN, label + " SIGPIPE ignored (a dead peer is an error)",
                  "SIGPIPE is not SIG_IGN after creating a gloo group");
  }
  if (pg == nullptr) {
    return 1;
  }
  checkBarrier(report, *pg, label);
  OpsChecker ops(report, *pg, label, cuda, form);
  ops.runAll({kLengths.begin(), kLengths.end()});
  checkP2p(report, *pg, label, cuda, !cuda);
  if (pg->size() >= 2) {
    std::vector<int> odd;
    for (int r = 1; r < pg->size(); r += 2) {
      odd.push_back(r);
    }
    checkSubGroup(report, *pg, odd, label, cuda);
    checkSubGroup(report, *pg, {pg->size() - 1, 0}, label, cuda);
  }
  if (!cuda) {  // NCCL has no tags and no per-wait timeout to speak of
    checkWaitTimeout(report, *pg, label, cuda);
  }
  guarded(report, label + " final barrier", [&] { pg->barrier(); });
  report.pass(label + " all checks ran");
  return report.exitCode();
}

}  // namespace dtrt_check
