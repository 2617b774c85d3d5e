#include "console/console_relay.h"

#include <charconv>

#include <boost/asio/post.hpp>

namespace dtrun::agent::detail {
namespace {

constexpr std::size_t kPopBatch = 256;
constexpr std::chrono::milliseconds kPopWait{200};
// A sending node's own window: short, so the store's node, whose window counts from the
// printing, has most of its window left to merge them.
constexpr std::chrono::milliseconds kSenderWindow{20};

// "<stream> <age ms> <ranks a,b,...> <length>\n<text>" per group.
void encodeOne(const CollapsedLine& line, std::chrono::milliseconds age, std::string& out) {
  out += std::to_string(static_cast<int>(line.stream));
  out += ' ';
  out += std::to_string(std::max<std::int64_t>(age.count(), 0));
  out += ' ';
  for (std::size_t i = 0; i < line.ranks.size(); ++i) {
    out += (i ? "," : "") + std::to_string(line.ranks[i]);
  }
  out += ' ';
  out += std::to_string(line.text.size());
  out += '\n';
  out += line.text;
}

bool readNumber(std::string_view& text, char end, std::int64_t& value) {
  const auto at = text.find(end);
  if (at == std::string_view::npos) {
    return false;
  }
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + at, value);
  if (ec != std::errc() || ptr != text.data() + at) {
    return false;
  }
  text.remove_prefix(at + 1);
  return true;
}

}  // namespace

std::string encodeGroups(const std::vector<CollapsedLine>& lines,
                         ConsoleCollapse::Clock::time_point now) {
  std::string out;
  for (const auto& line : lines) {
    encodeOne(line, std::chrono::duration_cast<std::chrono::milliseconds>(now - line.oldest), out);
  }
  return out;
}

std::vector<ReceivedGroup> decodeGroups(std::string_view text) {
  std::vector<ReceivedGroup> out;
  while (!text.empty()) {
    ReceivedGroup g;
    std::int64_t stream = 0;
    std::int64_t age = 0;
    std::int64_t length = 0;
    if (!readNumber(text, ' ', stream) || !readNumber(text, ' ', age)) {
      break;
    }
    const auto space = text.find(' ');
    if (space == std::string_view::npos) {
      break;
    }
    std::string_view ranks = text.substr(0, space);
    text.remove_prefix(space + 1);
    while (!ranks.empty()) {
      std::int64_t r = 0;
      const auto comma = ranks.find(',');
      const auto part = ranks.substr(0, comma);
      if (std::from_chars(part.data(), part.data() + part.size(), r).ec != std::errc()) {
        return out;
      }
      g.ranks.push_back(static_cast<int>(r));
      ranks.remove_prefix(comma == std::string_view::npos ? ranks.size() : comma + 1);
    }
    if (!readNumber(text, '\n', length) || length < 0 ||
        static_cast<std::size_t>(length) > text.size() || g.ranks.empty()) {
      break;
    }
    g.stream = stream == 1 ? ConsoleStream::kErr : ConsoleStream::kOut;
    g.age = std::chrono::milliseconds(age);
    g.text = std::string(text.substr(0, static_cast<std::size_t>(length)));
    text.remove_prefix(static_cast<std::size_t>(length));
    out.push_back(std::move(g));
  }
  return out;
}

Result<std::unique_ptr<ConsoleRelay>> ConsoleRelay::connect(
    boost::asio::io_context& io, const rdzv::StoreFactory& stores, const std::string& jobId,
    std::shared_ptr<CollapsedConsole> console, bool receiver) {
  DTRUN_ASSIGN_OR_RETURN(auto store, stores());
  return std::unique_ptr<ConsoleRelay>(new ConsoleRelay(
      io, std::move(store), "dtrun/" + jobId + "/console", std::move(console), receiver));
}

ConsoleRelay::ConsoleRelay(boost::asio::io_context& io, std::unique_ptr<rdzv::Store> store,
                           std::string key, std::shared_ptr<CollapsedConsole> console,
                           bool receiver)
    : io_(io),
      store_(std::move(store)),
      key_(std::move(key)),
      console_(std::move(console)),
      receiver_(receiver) {
  if (receiver_) {
    console_->setJobWide(true);
    receiverThread_ = std::thread([this] { receive(); });
    return;
  }
  sender_ = std::make_unique<TaskThread>();
  console_->setWindow(kSenderWindow);
  console_->setSink([this](const std::vector<CollapsedLine>& lines) {
    std::string batch = encodeGroups(lines, ConsoleCollapse::Clock::now());
    sender_->post([this, batch = std::move(batch)] {
      static_cast<void>(store_->queuePush(key_, batch));  // a lost store: the agent sees it
    });
  });
}

ConsoleRelay::~ConsoleRelay() {
  try {
    finish();
  } catch (
      ...) {  // NOLINT(bugprone-empty-catch): at exit a lost console line is no reason to abort
  }
}

void ConsoleRelay::finish() {
  if (!receiver_) {
    console_->flushAll();
    console_->setSink(nullptr);
    sender_.reset();  // sends what is queued, then joins
    return;
  }
  stopping_ = true;
  receiverThread_.join();
  // What the other nodes sent before they ended: printed now, merged as far as it goes.
  if (auto last = store_->queuePopMany(key_, kPopBatch, std::chrono::milliseconds(1));
      last.isOk()) {
    for (const auto& item : last.value()) {
      for (const auto& g : decodeGroups(std::string_view(item.data(), item.size()))) {
        console_->group(g.stream, g.ranks, g.text, g.age);
      }
    }
  }
  console_->flushAll();
}

void ConsoleRelay::receive() {
  while (!stopping_) {
    auto items = store_->queuePopMany(key_, kPopBatch, kPopWait);
    if (!items.isOk()) {
      if (items.status().code() != Errc::kTimeout) {
        std::this_thread::sleep_for(kPopWait);  // the agent judges a lost store
      }
      continue;
    }
    std::vector<ReceivedGroup> groups;
    for (const auto& item : items.value()) {
      auto decoded = decodeGroups(std::string_view(item.data(), item.size()));
      std::move(decoded.begin(), decoded.end(), std::back_inserter(groups));
    }
    boost::asio::post(io_, [console = console_, groups = std::move(groups)] {
      for (const auto& g : groups) {
        console->group(g.stream, g.ranks, g.text, g.age);
      }
    });
  }
}

}  // namespace dtrun::agent::detail
