// The shared-memory segment of a group: its making, attaching and removal, the orphan sweep, and
// the barrier (per-rank step counters, a short spin, then a futex wait with a deadline that also
// watches whether the awaited process still exists).
#include "shm_group.h"

#include <zero/error.h>

#include <dirent.h>
#include <signal.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace zero::detail {

namespace {

constexpr uint64_t kMagic = 0x7a65726f73686d31ULL;  // "zeroshm1"
const std::string kPrefix = "zero-shm-";

size_t round_up(size_t v, size_t to) {
  return (v + to - 1) / to * to;
}

bool process_gone(pid_t pid) {
  if (::kill(pid, 0) == -1 && errno == ESRCH) return true;
  // A rank that died but is not reaped yet is a zombie: gone for our purposes.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() &&
         (line[paren + 2] == 'Z' || line[paren + 2] == 'X');
}

// 0 when unknown: then no peer's pid is trusted.
uint64_t pid_namespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // Not FUTEX_PRIVATE: the word is shared between processes.
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

// Whether `step` was reached by a counter now at `at` (steps wrap around).
bool reached(uint32_t at, uint32_t step) {
  return static_cast<int32_t>(at - step) >= 0;
}

}  // namespace

struct ShmGroup::Header {
  uint64_t magic;
  uint64_t nonce;
  int32_t size;
  int64_t slot_bytes;
  uint64_t data_offset;
  uint64_t p2p_offset;      // the point-to-point channels: size x size of them, then their chunks
  int64_t p2p_chunk_bytes;  // data bytes per chunk (each chunk starts with a ChunkHeader)
};

struct alignas(128) ShmGroup::RankControl {
  std::atomic<uint32_t> step;     // the last barrier step this rank reached
  std::atomic<uint32_t> waiters;  // processes asleep on `step`
  std::atomic<int32_t> pid;
  std::atomic<uint64_t> pid_namespace;  // the inode of /proc/self/ns/pid: pids compare within one
  std::atomic<uint32_t> doorbell;       // rung when a channel to or from this rank moved
  std::atomic<uint32_t> bell_waiters;   // processes asleep on `doorbell`
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex words must be lock-free");

std::vector<std::string> remove_orphan_segments() {
  std::vector<std::string> removed;
  const std::string mine = kPrefix + std::to_string(::getuid()) + "-";
  DIR* d = ::opendir("/dev/shm");  // where Linux shows the POSIX shared-memory objects
  if (!d) return removed;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(mine, 0) != 0) continue;
    const std::string rest = name.substr(mine.size());  // "<pid>-<n>"
    char* end = nullptr;
    const long pid = std::strtol(rest.c_str(), &end, 10);
    if (pid <= 0 || !end || *end != '-') continue;
    if (!process_gone(static_cast<pid_t>(pid))) continue;
    if (::shm_unlink(("/" + name).c_str()) == 0) removed.push_back(name);
  }
  ::closedir(d);
  return removed;
}

namespace {

std::string new_segment_name() {
  static std::atomic<int> counter{0};
  return "/" + kPrefix + std::to_string(::getuid()) + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(counter++);
}

}  // namespace

void* create_shared_segment(size_t bytes, std::string& name) {
  remove_orphan_segments();
  name = new_segment_name();
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ZERO_CHECK(fd >= 0, CommError, "shm_open(", name, ") failed: ", std::strerror(errno));
  // posix_fallocate, not ftruncate alone: a full /dev/shm must fail here, not as a SIGBUS later.
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  void* base =
      rc == 0 ? ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int map_errno = errno;
  ::close(fd);
  if (base == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    throw CommError(str("cannot reserve ", bytes, " bytes of shared memory (", name,
                        "): ", std::strerror(rc ? rc : map_errno)));
  }
  return base;
}

void* attach_shared_segment(const std::string& name, size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  ZERO_CHECK(fd >= 0, CommError, "shm_open(", name, ") failed: ", std::strerror(errno),
             " (the ranks do not share /dev/shm)");
  struct stat st {};
  const bool ok = ::fstat(fd, &st) == 0 && st.st_size == static_cast<off_t>(bytes);
  void* base = ok ? ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int map_errno = errno;
  ::close(fd);
  ZERO_CHECK(base != MAP_FAILED, CommError, "cannot map ", name, ": ",
             ok ? std::strerror(map_errno) : str("its size is not ", bytes, " bytes"));
  return base;
}

ShmGroup::ShmGroup(std::string name, void* base, size_t bytes, int rank, int size)
    : name_(std::move(name)), base_(base), bytes_(bytes), rank_(rank), size_(size) {
  if (const char* v = std::getenv("ZERO_SHM_SPIN_US"); v && *v) spin_ns_ = std::atoll(v) * 1000;
  control(rank_).pid.store(static_cast<int32_t>(::getpid()));
  control(rank_).pid_namespace.store(pid_namespace());
  watch_pid_.assign(size_, false);
  sent_chunks_.assign(size_, 0);
  received_chunks_.assign(size_, 0);
}

std::unique_ptr<ShmGroup> ShmGroup::create(int size, int64_t slot_bytes) {
  const size_t controls = round_up(sizeof(Header), 128) + sizeof(RankControl) * size;
  const size_t data_offset = round_up(controls, 4096);
  const size_t p2p_offset = data_offset + static_cast<size_t>(size) * 2 * slot_bytes;
  const size_t pairs = static_cast<size_t>(size) * size;
  const size_t bytes = p2p_offset + pairs * sizeof(Channel) +
                       pairs * kChunksPerChannel * (kChunkHeaderBytes + kP2PChunkBytes);
  std::string name;
  void* base = create_shared_segment(bytes, name);
  auto* header = new (base) Header{};
  header->magic = kMagic;
  header->nonce = std::random_device{}() * 0x100000001ULL ^ std::random_device{}();
  header->size = size;
  header->slot_bytes = slot_bytes;
  header->data_offset = data_offset;
  header->p2p_offset = p2p_offset;
  header->p2p_chunk_bytes = kP2PChunkBytes;
  for (size_t i = 0; i < pairs; ++i)
    new (static_cast<char*>(base) + p2p_offset + i * sizeof(Channel)) Channel{};
  auto* controls_at = reinterpret_cast<char*>(base) + round_up(sizeof(Header), 128);
  for (int r = 0; r < size; ++r) new (controls_at + r * sizeof(RankControl)) RankControl{};
  return std::unique_ptr<ShmGroup>(new ShmGroup(name, base, bytes, 0, size));
}

std::unique_ptr<ShmGroup> ShmGroup::attach(const std::string& name, uint64_t nonce, int rank,
                                           int size) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  ZERO_CHECK(fd >= 0, CommError, "shm_open(", name, ") failed: ", std::strerror(errno),
             " (the ranks do not share /dev/shm)");
  struct stat st {};
  const bool ok = ::fstat(fd, &st) == 0 && st.st_size >= static_cast<off_t>(sizeof(Header));
  void* base =
      ok ? ::mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int map_errno = errno;
  ::close(fd);
  ZERO_CHECK(base != MAP_FAILED, CommError, "cannot map ", name, ": ",
             ok ? std::strerror(map_errno) : "too small");
  const auto* header = static_cast<const Header*>(base);
  if (header->magic != kMagic || header->nonce != nonce || header->size != size) {
    ::munmap(base, st.st_size);
    throw CommError(str(name, " is not this group's segment (another job's, or a stale one)"));
  }
  return std::unique_ptr<ShmGroup>(new ShmGroup(name, base, st.st_size, rank, size));
}

ShmGroup::~ShmGroup() {
  if (!unlinked_ && rank_ == 0) ::shm_unlink(name_.c_str());
  if (base_) ::munmap(base_, bytes_);
}

uint64_t ShmGroup::nonce() const {
  return static_cast<const Header*>(base_)->nonce;
}
int64_t ShmGroup::slot_bytes() const {
  return static_cast<const Header*>(base_)->slot_bytes;
}

void ShmGroup::all_attached() {
  // Every rank is attached: its pid is in its control block, and which of them this process can
  // watch is known now.
  const uint64_t ns = pid_namespace();
  for (int r = 0; r < size_; ++r) {
    const int32_t pid = control(r).pid.load();
    watch_pid_[r] = r != rank_ && pid > 0 && ns != 0 && control(r).pid_namespace.load() == ns &&
                    ::kill(pid, 0) == 0;
  }
  if (unlinked_) return;
  unlinked_ = true;
  if (rank_ == 0) ::shm_unlink(name_.c_str());
}

ShmGroup::RankControl& ShmGroup::control(int rank) const {
  auto* at = static_cast<char*>(base_) + round_up(sizeof(Header), 128);
  return *reinterpret_cast<RankControl*>(at + rank * sizeof(RankControl));
}

char* ShmGroup::slot(int rank, int buffer) const {
  const auto* header = static_cast<const Header*>(base_);
  return static_cast<char*>(base_) + header->data_offset +
         (static_cast<size_t>(rank) * 2 + buffer) * header->slot_bytes;
}

ShmGroup::Channel& ShmGroup::channel(int from, int to) const {
  const auto* header = static_cast<const Header*>(base_);
  auto* at = static_cast<char*>(base_) + header->p2p_offset;
  return reinterpret_cast<Channel*>(at)[from * size_ + to];
}

char* ShmGroup::chunk(int from, int to, uint32_t index) const {
  const auto* header = static_cast<const Header*>(base_);
  const size_t pairs = static_cast<size_t>(size_) * size_;
  const size_t chunk_bytes = kChunkHeaderBytes + header->p2p_chunk_bytes;
  const size_t pair = static_cast<size_t>(from) * size_ + to;
  return static_cast<char*>(base_) + header->p2p_offset + pairs * sizeof(Channel) +
         (pair * kChunksPerChannel + index % kChunksPerChannel) * chunk_bytes;
}

int64_t ShmGroup::p2p_chunk_bytes() const {
  return static_cast<const Header*>(base_)->p2p_chunk_bytes;
}

void ShmGroup::ring(int rank) {
  RankControl& c = control(rank);
  c.doorbell.fetch_add(1);
  if (c.bell_waiters.load() > 0) futex(&c.doorbell, FUTEX_WAKE, INT_MAX, nullptr);
}

uint32_t ShmGroup::my_doorbell() const {
  return control(rank_).doorbell.load();
}

void ShmGroup::wait_bell(uint32_t seen, Clock::time_point until) {
  RankControl& c = control(rank_);
  const auto spin_until = Clock::now() + std::chrono::nanoseconds(spin_ns_);
  for (int i = 1;; ++i) {
    if (c.doorbell.load(std::memory_order_acquire) != seen) return;
#if defined(__x86_64__)
    _mm_pause();
#endif
    if (i % 64 == 0 && Clock::now() >= spin_until) break;
  }
  const auto now = Clock::now();
  if (now >= until) return;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(until - now).count();
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  c.bell_waiters.fetch_add(1);
  futex(&c.doorbell, FUTEX_WAIT, seen, &ts);
  c.bell_waiters.fetch_sub(1);
}

bool ShmGroup::peer_exited(int peer) const {
  return watch_pid_[peer] && process_gone(static_cast<pid_t>(control(peer).pid.load()));
}

void ShmGroup::sync(Clock::time_point deadline) {
  const uint32_t step = ++step_;
  RankControl& me = control(rank_);
  me.step.store(step);
  if (me.waiters.load() > 0) futex(&me.step, FUTEX_WAKE, INT_MAX, nullptr);
  for (int r = 0; r < size_; ++r)
    if (r != rank_) wait_for(r, step, deadline);
}

void ShmGroup::wait_for(int peer, uint32_t step, Clock::time_point deadline) {
  RankControl& c = control(peer);
  if (reached(c.step.load(std::memory_order_acquire), step)) return;
  const auto spin_until = Clock::now() + std::chrono::nanoseconds(spin_ns_);
  for (int i = 1;; ++i) {
    if (reached(c.step.load(std::memory_order_acquire), step)) return;
#if defined(__x86_64__)
    _mm_pause();
#endif
    if (i % 64 == 0 && Clock::now() >= spin_until) break;
  }
  c.waiters.fetch_add(1);
  struct Leave {
    std::atomic<uint32_t>& w;
    ~Leave() { w.fetch_sub(1); }
  } leave{c.waiters};
  for (;;) {
    const uint32_t at = c.step.load();
    if (reached(at, step)) return;
    const auto now = Clock::now();
    if (now >= deadline || peer_exited(peer)) {
      std::vector<int> missing, exited;
      for (int r = 0; r < size_; ++r) {
        if (r == rank_ || reached(control(r).step.load(), step)) continue;
        missing.push_back(r);
        if (peer_exited(r)) exited.push_back(r);
      }
      throw ShmWaitError(missing, exited);
    }
    // Sleep in slices, so a peer's exit is noticed within one.
    const auto slice = std::min<Clock::duration>(deadline - now, std::chrono::milliseconds(100));
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    futex(&c.step, FUTEX_WAIT, at, &ts);
  }
}

}  // namespace zero::detail
