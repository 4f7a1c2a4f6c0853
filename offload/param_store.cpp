// ParamStores for offload_param: host memory (every shard a resident host tensor) and NVMe (the
// first max_in_cpu elements resident, the rest in one swap file, params.swap, each shard's
// region aligned for O_DIRECT; buffer_count swap-in buffers hold shards being read or used, and
// two write buffers let the optimizer's next sub-group run while the previous one is written).
#include <zero/error.h>
#include <zero/offload/aio.h>
#include <zero/offload/offload_optimizer.h>
#include <zero/offload/param_offload.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <optional>

namespace zero::offload {

namespace {

class ParamStoreBase : public ParamStore {
 public:
  explicit ParamStoreBase(bool pin) : pin_(pin) {}
  c10::ScalarType dtype() const override { return dtype_; }

 protected:
  // Group g's resident host tensor (empty when the group is swapped or not held).
  at::Tensor& resident(int group) { return resident_.at(static_cast<size_t>(group)); }
  void make_resident(int group, int64_t numel) {
    resident(group) = host_empty(numel, dtype_, pin_);
  }
  int64_t resident_bytes() const {
    int64_t n = 0;
    for (const at::Tensor& t : resident_)
      if (t.defined()) n += t.nbytes();
    return n;
  }

  bool pin_;
  c10::ScalarType dtype_ = c10::ScalarType::Float;
  std::vector<at::Tensor> resident_;
};

class HostParamStore : public ParamStoreBase {
 public:
  using ParamStoreBase::ParamStoreBase;

  void init(const std::vector<int64_t>& group_numels, c10::ScalarType dtype) override {
    dtype_ = dtype;
    resident_.assign(group_numels.size(), at::Tensor());
    for (size_t g = 0; g < group_numels.size(); ++g)
      if (group_numels[g] > 0) make_resident(static_cast<int>(g), group_numels[g]);
  }
  at::Tensor acquire(int group) override { return resident(group); }
  void release(int group) override {}
  void write(int group, int64_t begin, const at::Tensor& values) override {
    resident(group).narrow(0, begin, values.numel()).copy_(values);
  }
  void flush() override {}
  ParamStoreMemory memory() const override { return {resident_bytes(), 0, 0}; }
  const char* location() const override { return "cpu"; }
};

class NvmeParamStore : public ParamStoreBase {
 public:
  explicit NvmeParamStore(const ParamOffloadOptions& o)
      : ParamStoreBase(o.pin_memory), options_(o), aio_(o.aio, o.rank) {
    ZERO_CHECK(o.dir, UsageError, "offload_param nvme: no swap folder");
    ZERO_CHECK(o.buffer_count >= 1, ConfigError,
               "zero_optimization.offload_param.buffer_count must be >= 1, got ", o.buffer_count);
  }

  void init(const std::vector<int64_t>& group_numels, c10::ScalarType dtype) override {
    dtype_ = dtype;
    element_bytes_ = static_cast<int64_t>(c10::elementSize(dtype));
    resident_.assign(group_numels.size(), at::Tensor());
    offsets_.assign(group_numels.size(), -1);
    numels_ = group_numels;
    // DeepSpeed keeps the first max_in_cpu elements in host memory and swaps the rest.
    int64_t in_cpu = 0, file_bytes = 0, largest = 0;
    for (size_t g = 0; g < group_numels.size(); ++g) {
      const int64_t n = group_numels[g];
      if (n == 0) continue;
      if (in_cpu + n <= options_.max_in_cpu_numel) {
        make_resident(static_cast<int>(g), n);
        in_cpu += n;
        continue;
      }
      ZERO_CHECK(n <= options_.buffer_numel, ConfigError,
                 "zero_optimization.offload_param.buffer_size (", options_.buffer_numel,
                 " elements) is smaller than this rank's shard of layout group ", g, " (", n,
                 " elements); raise buffer_size to at least ", n);
      offsets_[g] = file_bytes;
      file_bytes += align_up(n * element_bytes_);
      largest = std::max(largest, align_up(n * element_bytes_));
    }
    if (file_bytes == 0) return;
    file_ = options_.dir->create_file("params.swap", file_bytes);
    for (int b = 0; b < options_.buffer_count; ++b) slots_.push_back(Slot{AlignedBuffer(largest)});
  }

  at::Tensor acquire(int group) override {
    if (resident(group).defined()) return resident(group);
    Slot& slot = read_into_slot(group);
    ZERO_ASSERT(!slot.acquired, "offload_param: group ", group, " acquired twice");
    if (slot.read) {
      aio_.wait(*slot.read);
      slot.read.reset();
    }
    slot.acquired = true;
    return at::from_blob(slot.buffer.data(), {numels_[group]}, at::TensorOptions().dtype(dtype_));
  }

  void release(int group) override {
    if (resident(group).defined()) return;
    for (Slot& s : slots_)
      if (s.holds == group) s.acquired = false;
  }

  void prefetch(int group) override {
    if (resident(group).defined() || holding(group)) return;
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[(next_slot_ + i) % slots_.size()];
      if (s.acquired || s.read) continue;
      issue_read(s, group);
      next_slot_ = (next_slot_ + i + 1) % slots_.size();
      return;
    }
  }

  void write(int group, int64_t begin, const at::Tensor& values) override {
    if (resident(group).defined()) {
      resident(group).narrow(0, begin, values.numel()).copy_(values);
      return;
    }
    const int64_t numel = values.numel();
    ZERO_ASSERT(begin % write_align_numel() == 0 && begin + numel <= numels_[group],
                "offload_param: unaligned write at ", begin, " of group ", group);
    // A swapped-in copy of this group is stale from now on.
    for (Slot& s : slots_)
      if (s.holds == group) {
        ZERO_ASSERT(!s.acquired, "offload_param: group ", group, " written while in use");
        if (s.read) aio_.wait(*s.read);
        s = Slot{std::move(s.buffer)};
      }
    WriteBuffer& w = writes_[next_write_];
    next_write_ = 1 - next_write_;
    if (w.ticket) aio_.wait(*w.ticket);
    w.ticket.reset();
    const int64_t bytes = numel * element_bytes_;
    if (w.buffer.size_bytes() < align_up(bytes)) w.buffer = AlignedBuffer(align_up(bytes));
    std::memcpy(w.buffer.data(), values.contiguous().data_ptr(), static_cast<size_t>(bytes));
    // The last piece of a region is padded to the block: the region is rounded up for that.
    std::memset(w.buffer.as<char>() + bytes, 0, static_cast<size_t>(align_up(bytes) - bytes));
    w.ticket = aio_.write(file_, offsets_[group] + begin * element_bytes_, w.buffer.data(),
                          align_up(bytes));
  }

  void flush() override {
    for (WriteBuffer& w : writes_)
      if (w.ticket) {
        aio_.wait(*w.ticket);
        w.ticket.reset();
      }
  }

  int64_t write_align_numel() const override { return kIoAlign / element_bytes_; }

  ParamStoreMemory memory() const override {
    ParamStoreMemory m{resident_bytes(), 0, file_.size_bytes()};
    for (const Slot& s : slots_) m.host_buffers_bytes += s.buffer.size_bytes();
    for (const WriteBuffer& w : writes_) m.host_buffers_bytes += w.buffer.size_bytes();
    return m;
  }
  const char* location() const override { return "nvme"; }

 private:
  struct Slot {
    explicit Slot(AlignedBuffer b) : buffer(std::move(b)) {}  // nothing in flight, holds nothing
    AlignedBuffer buffer;
    std::optional<int> holds;  // the group read (or being read) into it
    std::optional<AioEngine::Ticket> read;
    bool acquired = false;
  };
  struct WriteBuffer {
    AlignedBuffer buffer;
    std::optional<AioEngine::Ticket> ticket;
  };

  bool holding(int group) const {
    return std::any_of(slots_.begin(), slots_.end(),
                       [&](const Slot& s) { return s.holds == group; });
  }

  void issue_read(Slot& s, int group) {
    s.holds = group;
    s.read = aio_.read(file_, offsets_[group], s.buffer.data(),
                       align_up(numels_[group] * element_bytes_));
  }

  // The slot holding `group`, or a slot not in use made to read it (the round-robin next one,
  // so prefetched reads are evicted oldest first).
  Slot& read_into_slot(int group) {
    for (Slot& s : slots_)
      if (s.holds == group) return s;
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[(next_slot_ + i) % slots_.size()];
      if (s.acquired) continue;
      next_slot_ = (next_slot_ + i + 1) % slots_.size();
      if (s.read) aio_.wait(*s.read);
      s = Slot{std::move(s.buffer)};
      issue_read(s, group);
      return s;
    }
    throw UsageError(zero::detail::str(
        "rank ", options_.rank, ": offload_param: all ", slots_.size(),
        " swap-in buffers are in use; raise zero_optimization.offload_param.buffer_count"));
  }

  ParamOffloadOptions options_;
  int64_t element_bytes_ = 4;
  std::vector<int64_t> numels_, offsets_;  // per group; offset -1: resident or not held
  SwapFile file_;
  std::vector<Slot> slots_;
  WriteBuffer writes_[2];
  int next_write_ = 0;
  size_t next_slot_ = 0;
  AioEngine aio_;  // last: destroyed first, so nothing is in flight when buffers and files go
};

}  // namespace

std::shared_ptr<ParamStore> make_param_store(const ParamOffloadOptions& options) {
  if (options.nvme) return std::make_shared<NvmeParamStore>(options);
  return std::make_shared<HostParamStore>(options.pin_memory);
}

}  // namespace zero::offload
