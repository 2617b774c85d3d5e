// fuse_hold MOUNTPOINT: a file system of one file, `held`, whose reads are never answered: a
// process that reads it and is then killed waits in the kernel for the answer (uninterruptible
// sleep, state D) until this program ends, which aborts the connection. The test's way to make
// a worker that SIGKILL cannot end (a dead NFS server's, a GPU driver's hung call).
// Speaks the kernel's FUSE protocol on /dev/fuse directly (no libfuse); root only (mount(2)).
// Prints "ready" once mounted; on SIGTERM or SIGINT unmounts (lazily: a reader may still be
// inside) and exits 0.
#include <array>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {

constexpr std::uint64_t kFileInode = 2;
volatile std::sig_atomic_t stopping = 0;

void onSignal(int /*sig*/) { stopping = 1; }

void reply(int fd, std::uint64_t unique, int error, const void* body, std::size_t size) {
  fuse_out_header out{};
  out.len = static_cast<std::uint32_t>(sizeof out + (error == 0 ? size : 0));
  out.error = -error;
  out.unique = unique;
  std::vector<char> buffer(out.len);
  std::memcpy(buffer.data(), &out, sizeof out);
  if (error == 0 && size > 0) {
    std::memcpy(buffer.data() + sizeof out, body, size);
  }
  if (::write(fd, buffer.data(), buffer.size()) < 0) {
    std::perror("fuse_hold: write /dev/fuse");
  }
}

fuse_attr attrOf(std::uint64_t inode) {
  fuse_attr a{};
  a.ino = inode;
  a.mode = inode == FUSE_ROOT_ID ? (S_IFDIR | 0755) : (S_IFREG | 0444);
  a.nlink = inode == FUSE_ROOT_ID ? 2 : 1;
  a.size = inode == FUSE_ROOT_ID ? 0 : 4096;
  a.blksize = 4096;
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuse_hold MOUNTPOINT\n");
    return 2;
  }
  const char* mountpoint = argv[1];
  const int fd = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    std::perror("fuse_hold: open /dev/fuse");
    return 1;
  }
  const std::string options = "fd=" + std::to_string(fd) +
                              ",rootmode=40000,user_id=" + std::to_string(::getuid()) +
                              ",group_id=" + std::to_string(::getgid());
  if (::mount("fuse_hold", mountpoint, "fuse", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
    std::perror("fuse_hold: mount");
    return 1;
  }
  struct sigaction action {};
  action.sa_handler = onSignal;  // no SA_RESTART: poll returns EINTR
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);
  std::printf("ready\n");
  std::fflush(stdout);
  std::vector<char> buffer(FUSE_MIN_READ_BUFFER + 65536);
  while (stopping == 0) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) {
      continue;
    }
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < static_cast<ssize_t>(sizeof(fuse_in_header))) {
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == ENOENT)) {
        continue;
      }
      break;  // the connection ended (ENODEV: unmounted)
    }
    fuse_in_header in{};
    std::memcpy(&in, buffer.data(), sizeof in);
    const char* body = buffer.data() + sizeof in;
    switch (in.opcode) {
      case FUSE_INIT: {
        fuse_init_in init{};
        std::memcpy(&init, body, sizeof init);
        fuse_init_out out{};
        out.major = FUSE_KERNEL_VERSION;
        out.minor = init.minor < FUSE_KERNEL_MINOR_VERSION ? init.minor : FUSE_KERNEL_MINOR_VERSION;
        out.max_readahead = init.max_readahead;
        out.max_write = 65536;
        reply(fd, in.unique, 0, &out, sizeof out);
        break;
      }
      case FUSE_LOOKUP: {
        if (in.nodeid != FUSE_ROOT_ID || std::strcmp(body, "held") != 0) {
          reply(fd, in.unique, ENOENT, nullptr, 0);
          break;
        }
        fuse_entry_out out{};
        out.nodeid = kFileInode;
        out.attr = attrOf(kFileInode);
        reply(fd, in.unique, 0, &out, sizeof out);
        break;
      }
      case FUSE_GETATTR: {
        fuse_attr_out out{};
        out.attr = attrOf(in.nodeid);
        reply(fd, in.unique, 0, &out, sizeof out);
        break;
      }
      case FUSE_OPEN:
      case FUSE_OPENDIR: {
        fuse_open_out out{};
        out.open_flags = FOPEN_DIRECT_IO;  // every read reaches this program, none the cache
        reply(fd, in.unique, 0, &out, sizeof out);
        break;
      }
      case FUSE_READ:
      case FUSE_INTERRUPT:
      case FUSE_FORGET:
      case FUSE_BATCH_FORGET:
        break;  // a read is held forever; the others get no answer by protocol
      case FUSE_RELEASE:
      case FUSE_RELEASEDIR:
      case FUSE_FLUSH:
        reply(fd, in.unique, 0, nullptr, 0);
        break;
      default:
        reply(fd, in.unique, ENOSYS, nullptr, 0);
        break;
    }
  }
  ::umount2(mountpoint, MNT_DETACH);
  ::close(fd);  // aborts the connection: a reader held in the kernel gets its error and goes
  return 0;
}
