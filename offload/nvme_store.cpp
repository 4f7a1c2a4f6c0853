// StateStore on NVMe (ZeRO-Infinity): the master and moments of every sub-group live in one
// swap file under nvme_path/<job id>/rank<N>/, [master | exp_avg | exp_avg_sq] per sub-group,
// each part aligned for O_DIRECT. Host memory holds buffer_count sub-group buffers: a pass reads
// sub-groups k+1 .. k+buffer_count-1 ahead as their buffers come free (pipeline_read) and writes
// k-1 back (pipeline_write) while Adam runs on k.
#include "state_store.h"

#include <zero/error.h>
#include <zero/offload/aio.h>
#include <zero/offload/offload_optimizer.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <optional>

namespace zero::offload {

namespace {

constexpr int kParts = 3;  // master, exp_avg, exp_avg_sq

class NvmeStore : public StateStore {
 public:
  NvmeStore(const NvmeOptions& o, bool fast_init)
      : options_(o), fast_init_(fast_init), dir_(o.dir), aio_(o.aio, o.rank) {}

  void init(const std::vector<int64_t>& shard_numels, const std::vector<SubGroup>& sub_groups,
            const std::function<void(size_t k, const at::Tensor& master)>& fill) override {
    shard_numels_ = shard_numels;
    sub_groups_ = sub_groups;
    int64_t offset = 0, largest = 0;
    for (const SubGroup& g : sub_groups) {
      part_bytes_.push_back(align_up(g.numel * static_cast<int64_t>(sizeof(float))));
      offsets_.push_back(offset);
      offset += kParts * part_bytes_.back();
      largest = std::max(largest, part_bytes_.back());
    }
    file_ = dir_->create_file("optimizer.swap", std::max<int64_t>(offset, kIoAlign));
    const int count = static_cast<int>(std::min<size_t>(std::max(options_.buffer_count, 1),
                                                        std::max<size_t>(sub_groups.size(), 1)));
    for (int b = 0; b < count; ++b) slots_.push_back(Slot{AlignedBuffer(kParts * largest)});
    // Masters from the parameters; moments zero (written, or left to the preallocated file's
    // zeros with fast_init).
    for (size_t k = 0; k < sub_groups.size(); ++k) {
      Slot& slot = free_slot(k);
      const SubGroupState st = views(k, slot);
      fill(k, st.master);
      int64_t bytes = part_bytes_[k];
      if (!fast_init_) {
        std::memset(static_cast<char*>(slot.buffer.data()) + part_bytes_[k], 0, 2 * part_bytes_[k]);
        bytes = kParts * part_bytes_[k];
      }
      slot.write = aio_.write(file_, offsets_[k], slot.buffer.data(), bytes);
    }
    aio_.wait_all();
    for (Slot& s : slots_) s = Slot{std::move(s.buffer)};
  }

  SubGroupState begin(size_t k) override {
    if (k == 0) drop_materialized();
    Slot& slot = read_into_slot(k);
    aio_.wait(*slot.read);
    slot.read.reset();
    read_ahead(k);
    return views(k, slot);
  }

  void end(size_t k) override {
    Slot& slot = slots_[k % slots_.size()];
    slot.write = aio_.write(file_, offsets_[k], slot.buffer.data(), kParts * part_bytes_[k]);
    if (!options_.pipeline_write) {
      aio_.wait(*slot.write);
      slot.write.reset();
    }
    read_ahead(k);  // a buffer whose write finished during Adam on k is free now
  }

  void finish() override {
    aio_.wait_all();
    for (Slot& s : slots_) s = Slot{std::move(s.buffer)};
  }

  // The whole shard read into host tensors, kept until the next pass or commit().
  SubGroupState shard_state(size_t shard) override {
    if (materialized_.empty()) materialized_.resize(shard_numels_.size());
    std::optional<SubGroupState>& m = materialized_.at(shard);
    if (m) return *m;
    const int64_t n = shard_numels_[shard];
    m = SubGroupState{host_empty(n, at::kFloat, false), host_empty(n, at::kFloat, false),
                      host_empty(n, at::kFloat, false)};
    for (size_t k = 0; k < sub_groups_.size(); ++k) {
      const SubGroup& g = sub_groups_[k];
      if (g.shard != shard) continue;
      Slot& slot = read_into_slot(k);
      aio_.wait(*slot.read);
      slot.read.reset();
      const SubGroupState st = views(k, slot);
      m->master.narrow(0, g.begin, g.numel).copy_(st.master);
      m->exp_avg.narrow(0, g.begin, g.numel).copy_(st.exp_avg);
      m->exp_avg_sq.narrow(0, g.begin, g.numel).copy_(st.exp_avg_sq);
    }
    return *m;
  }

  // Writes the materialized shards back (a checkpoint load filled them) and frees them.
  void commit() override {
    for (size_t k = 0; k < sub_groups_.size() && !materialized_.empty(); ++k) {
      const SubGroup& g = sub_groups_[k];
      const std::optional<SubGroupState>& m = materialized_[g.shard];
      if (!m) continue;
      Slot& slot = free_slot(k);
      const SubGroupState st = views(k, slot);
      st.master.copy_(m->master.narrow(0, g.begin, g.numel));
      st.exp_avg.copy_(m->exp_avg.narrow(0, g.begin, g.numel));
      st.exp_avg_sq.copy_(m->exp_avg_sq.narrow(0, g.begin, g.numel));
      slot.write = aio_.write(file_, offsets_[k], slot.buffer.data(), kParts * part_bytes_[k]);
    }
    finish();
    drop_materialized();
  }

  OffloadMemory memory() const override {
    OffloadMemory m;
    for (const Slot& s : slots_) m.host_buffers_bytes += s.buffer.size_bytes();
    for (const auto& st : materialized_)
      if (st) {
        m.host_master_bytes += st->master.nbytes();
        m.host_states_bytes += st->exp_avg.nbytes() + st->exp_avg_sq.nbytes();
      }
    m.nvme_bytes = file_.size_bytes();
    return m;
  }
  const char* location() const override { return "nvme"; }

 private:
  struct Slot {
    explicit Slot(AlignedBuffer b) : buffer(std::move(b)) {}  // nothing in flight, holds nothing
    AlignedBuffer buffer;
    std::optional<AioEngine::Ticket> read, write;  // in flight on this buffer
    std::optional<size_t> holds;                   // the sub-group read (or being read) into it
  };

  // Sub-group k's buffer, once the write of whatever it held before has completed.
  Slot& free_slot(size_t k) {
    Slot& slot = slots_[k % slots_.size()];
    if (slot.write) aio_.wait(*slot.write);
    if (slot.read) aio_.wait(*slot.read);
    slot.write.reset();
    slot.read.reset();
    slot.holds.reset();
    return slot;
  }

  // pipeline_read: reads of the sub-groups after k into the other buffers, in order, as far as
  // buffers are free. A buffer still being written back (sub-group k-1's, just issued) is left
  // for a later call instead of waited for: waiting here would hold Adam on k until that write
  // finished, and writes would never overlap the compute.
  void read_ahead(size_t k) {
    if (!options_.pipeline_read) return;
    for (size_t next = k + 1; next < std::min(sub_groups_.size(), k + slots_.size()); ++next) {
      const Slot& slot = slots_[next % slots_.size()];
      if (slot.holds == next) continue;
      if (slot.write && !aio_.is_completed(*slot.write)) return;
      read_into_slot(next);
    }
  }

  // Issues the read of sub-group k into its buffer (once); the caller waits on slot.read.
  Slot& read_into_slot(size_t k) {
    Slot& slot = slots_[k % slots_.size()];
    if (slot.holds == k && slot.read) return slot;
    Slot& free = free_slot(k);
    free.read = aio_.read(file_, offsets_[k], free.buffer.data(), kParts * part_bytes_[k]);
    free.holds = k;
    return free;
  }

  SubGroupState views(size_t k, const Slot& slot) const {
    const int64_t n = sub_groups_[k].numel;
    char* base = static_cast<char*>(slot.buffer.data());
    const auto opts = at::TensorOptions().dtype(at::kFloat);
    return {at::from_blob(base, {n}, opts), at::from_blob(base + part_bytes_[k], {n}, opts),
            at::from_blob(base + 2 * part_bytes_[k], {n}, opts)};
  }

  void drop_materialized() { materialized_.clear(); }

  NvmeOptions options_;
  bool fast_init_;
  std::shared_ptr<SwapDir> dir_;  // kept alive while the file is open
  SwapFile file_;
  std::vector<int64_t> shard_numels_;
  std::vector<SubGroup> sub_groups_;
  std::vector<int64_t> offsets_, part_bytes_;  // per sub-group: file offset, bytes of one part
  std::vector<Slot> slots_;
  std::vector<std::optional<SubGroupState>> materialized_;
  AioEngine aio_;  // last: destroyed first, so nothing is in flight when buffers and files go
};

}  // namespace

std::unique_ptr<StateStore> make_nvme_store(const NvmeOptions& options, bool fast_init) {
  return std::make_unique<NvmeStore>(options, fast_init);
}

}  // namespace zero::offload
