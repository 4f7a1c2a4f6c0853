// Stage 3: the unit table and its transitions (gather, prefetch, keep for reuse, release),
// gradient-arrival counting per unit, and re-gathering the rest-of-model unit outside backward.
#include "stage3.h"

#include <zero/core/float_type_torch.h>
#include <zero/error.h>

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstddef>
#include <optional>

namespace zero::detail {

const char* to_string(UnitState state) {
  switch (state) {
    case UnitState::kReleased:
      return "released";
    case UnitState::kGathering:
      return "gathering";
    case UnitState::kAvailable:
      return "available";
  }
  return "?";
}

Stage3::Stage3(const StageOptions& options, std::vector<at::Tensor> params, FlatLayout layout,
               std::shared_ptr<Communicator> comm, std::vector<UnitSpec> units,
               std::vector<at::Tensor> param_shards)
    : FlatStage(options, std::move(params), std::move(layout), std::move(comm),
                GradReduction::kReduceScatter) {
  ZERO_CHECK(units.size() >= 2, UsageError,
             "ZeRO stage 3 needs at least one block wrapped in zero::Sharded (LibTorch modules "
             "have no forward hooks, so stage 3 shards what is wrapped); none found in the model");
  units_.resize(units.size());
  for (size_t u = 0; u < units.size(); ++u) units_[u].name = units[u].name;
  std::vector<bool> sharded;
  for (size_t gi = 0; gi < layout_.groups().size(); ++gi) {
    const Group& g = layout_.groups()[gi];
    ZERO_ASSERT(g.unit >= 0 && g.unit < static_cast<int>(units_.size()), "unit ", g.unit);
    sharded.push_back(!g.persistent);
    if (g.persistent) continue;
    Unit& unit = units_[g.unit];
    unit.groups.push_back(static_cast<int>(gi));
    unit.numel += g.padded_numel;
    unit.bytes += g.padded_numel * float_type_bytes(g.dtype);
    unit.expected_grads += static_cast<int>(g.params.size());
  }
  // Two blocks (the next forward's first gather and its prefetch take them) and the rest of the
  // model, which the step releases and gathers again at once.
  for (size_t u = 1; u < units_.size(); ++u)
    park_limit_bytes_ = std::max(park_limit_bytes_, 2 * units_[u].bytes);
  park_limit_bytes_ += units_[0].bytes;
  setup(sharded, param_shards);
  if (options_.param_store) move_shards_to_store();
  // setup() left every buffer gathered; keep the rest of the model, release the blocks (with
  // host_shared_params every unit stays available: its buffers are the ranks' one shared copy).
  for (size_t u = 0; u < units_.size(); ++u) {
    units_[u].state = UnitState::kAvailable;
    if (shared_params_) continue;
    note_gathered_bytes(units_[u].bytes);
    live_numel_ += units_[u].numel;
  }
  release_all();
  peak_gathered_bytes_ = gathered_bytes_;
  // Not before: units built under zero::Init were never gathered, their flat buffers unfilled.
  keep_secondaries_ = options_.secondary_group != nullptr;
}

Stage3::~Stage3() {
  for (const Unit& u : units_) {
    if (u.state != UnitState::kReleased) continue;
    for (int gi : u.groups)
      for (int pi : layout_.groups()[gi].params)
        params_[pi].set_data(at::empty({0}, groups_[gi].flat.options()));
  }
}

void Stage3::move_shards_to_store() {
  ParamStore& store = *options_.param_store;
  std::vector<int64_t> numels(groups_.size(), 0);
  std::optional<FloatType> dtype;
  for (size_t g = 0; g < groups_.size(); ++g)
    if (groups_[g].sharded_params) {
      numels[g] = groups_[g].param_shard.numel();
      ZERO_ASSERT(!dtype || *dtype == layout_.groups()[g].dtype,
                  "offload_param: groups of two dtypes");
      dtype = layout_.groups()[g].dtype;
    }
  if (!dtype) return;  // every group persistent
  store.init(numels, to_scalar_type(*dtype));
  for (size_t g = 0; g < groups_.size(); ++g) {
    GroupBuffers& b = groups_[g];
    if (!b.sharded_params) continue;
    store.write(static_cast<int>(g), 0, b.param_shard.to(at::kCPU).contiguous());
    b.param_shard = at::Tensor();  // now a staging buffer, made for each gather
    b.compute_shard = at::Tensor();
  }
  store.flush();
}

void Stage3::write_masters_to_store() {
  ParamStore& store = *options_.param_store;
  // Pieces of about a bucket, so the store's write buffers stay small (a multiple of its
  // alignment: every piece but a group's last starts aligned).
  const int64_t align = store.write_align_numel();
  const int64_t piece = std::max<int64_t>(align, (int64_t{1} << 20) / align * align);
  for (size_t g = 0; g < groups_.size(); ++g) {
    const GroupBuffers& b = groups_[g];
    if (!b.sharded_params) continue;
    const int64_t n = b.master.numel();
    for (int64_t begin = 0; begin < n; begin += piece) {
      const at::Tensor values = b.master.narrow(0, begin, std::min(piece, n - begin));
      store.write(static_cast<int>(g), begin, values.to(at::kCPU, store.dtype()));
    }
  }
  store.flush();
}

std::vector<OptimizerShard> Stage3::optimizer_shards() {
  std::vector<OptimizerShard> out;
  for (size_t g = 0; g < groups_.size(); ++g) {
    out.push_back(shard_of(g, groups_[g].grad_shard));
    if (options_.param_store && groups_[g].sharded_params)
      out.back().param_store = options_.param_store.get();
  }
  return out;
}

void Stage3::start_gather(int unit, bool exact) {
  Unit& u = units_[unit];
  if (u.state != UnitState::kReleased || shared_params_) return;
  if (live_numel_ + u.numel > options_.max_live_numel) evict_kept(u.numel);
  if (live_numel_ + u.numel > options_.max_live_numel && !warned_live_) {
    spdlog::warn(
        "[rank {}] stage 3: unit '{}' ({} elements) must be gathered although {} are "
        "live; stage3_max_live_parameters ({}) is smaller than what one step needs",
        rank_, u.name, u.numel, live_numel_, options_.max_live_numel);
    warned_live_ = true;
  }
  const bool secondary = u.secondary;
  if (secondary && !u.groups.empty()) ++secondary_gathers_;
  for (int gi : u.groups) {
    GroupBuffers& b = groups_[gi];
    gather_storage(b.flat, b.flat.numel() * static_cast<int64_t>(b.flat.element_size()));
    if (secondary) {  // the same values, from the ranks of this host
      u.works.push_back(options_.secondary_group->all_gather(secondary_shards_[gi], b.flat));
      continue;
    }
    if (options_.param_store) {
      // Offloaded: the shard goes through a device buffer, kept until the gather finishes.
      const at::Tensor stored = options_.param_store->acquire(gi);
      b.param_shard = shard_buffer(stored.numel(), b.flat.options());
      b.param_shard.copy_(stored);
      options_.param_store->release(gi);
    }
    Communicator& gathering = options_.gather_group ? *options_.gather_group : *comm_;
    if (world_ == 1)
      b.flat.copy_(b.param_shard);
    else if (options_.quantized_weights && !exact)
      u.quantized.push_back(start_quantized_gather(gathering, b.param_shard, b.flat));
    else
      u.works.push_back(gathering.all_gather(b.param_shard, b.flat));
  }
  u.quantized_values =
      secondary ? u.secondary_quantized : options_.quantized_weights && !exact && world_ > 1;
  note_gathered_bytes(u.bytes);
  live_numel_ += u.numel;
  if (!u.groups.empty()) ++gathers_;  // a unit of persistent parameters only gathers nothing
  u.state = UnitState::kGathering;
}

void Stage3::release_storage(const at::Tensor& flat) {
  if (!flat.is_cpu()) return free_storage(flat);
  const int64_t nbytes = static_cast<int64_t>(flat.storage().nbytes());
  if (nbytes > park_limit_bytes_) return free_storage(flat);
  while (parked_bytes_ + nbytes > park_limit_bytes_) {  // the oldest make room
    parked_bytes_ -= parked_.front().nbytes;
    parked_.pop_front();
  }
  parked_.push_back({nbytes, take_storage(flat)});
  parked_bytes_ += nbytes;
}

void Stage3::gather_storage(const at::Tensor& flat, int64_t nbytes) {
  for (auto it = parked_.begin(); it != parked_.end(); ++it) {
    if (it->nbytes != nbytes) continue;
    put_storage(flat, std::move(it->data), nbytes);
    parked_bytes_ -= nbytes;
    parked_.erase(it);
    return;
  }
  allocate_storage(flat, nbytes);
}

at::Tensor Stage3::shard_buffer(int64_t numel, const at::TensorOptions& options) {
  for (const at::Tensor& b : shard_buffers_)  // held by nothing but this list
    if (b.storage().use_count() == 1 && b.numel() >= numel && b.scalar_type() == options.dtype() &&
        b.device() == options.device())
      return b.narrow(0, 0, numel);
  int64_t largest = numel;  // every buffer fits any shard
  for (size_t g = 0; g < groups_.size(); ++g)
    if (groups_[g].sharded_params) largest = std::max(largest, layout_.groups()[g].shard_numel);
  shard_buffers_.push_back(at::empty({largest}, options));
  return shard_buffers_.back().narrow(0, 0, numel);
}

void Stage3::finish_gather(int unit) {
  Unit& u = units_[unit];
  if (u.state == UnitState::kReleased) start_gather(unit);
  if (u.state == UnitState::kAvailable) return;
  for (auto& w : u.works) w->wait();
  u.works.clear();
  for (QuantizedGather& q : u.quantized) finish_quantized_gather(q);
  u.quantized.clear();
  if (options_.param_store)
    for (int gi : u.groups) groups_[gi].param_shard = at::Tensor();
  u.state = UnitState::kAvailable;
}

void Stage3::release(int unit) {
  Unit& u = units_[unit];
  if (u.state == UnitState::kReleased || held_ || shared_params_) return;
  if (u.state == UnitState::kGathering) finish_gather(unit);
  if (keep_secondaries_ && !u.secondary) keep_secondary(u);
  for (int gi : u.groups) release_storage(groups_[gi].flat);
  note_gathered_bytes(-u.bytes);
  live_numel_ -= u.numel;
  u.kept = false;
  u.state = UnitState::kReleased;
}

void Stage3::keep_secondary(Unit& u) {
  const Communicator& group = *options_.secondary_group;
  secondary_shards_.resize(groups_.size());
  for (int gi : u.groups) {
    const at::Tensor& flat = groups_[gi].flat;
    ZERO_ASSERT(flat.numel() % group.world_size() == 0, "hpZ: group ", gi, " of ", flat.numel(),
                " elements over ", group.world_size(), " ranks");
    const int64_t n = flat.numel() / group.world_size();
    secondary_shards_[gi] = flat.narrow(0, group.rank() * n, n).clone();
  }
  u.secondary = true;
  u.secondary_quantized = u.quantized_values;
}

void Stage3::drop_secondaries() {
  for (size_t v = 0; v < units_.size(); ++v) {
    Unit& u = units_[v];
    if (!u.secondary) continue;
    if (u.state == UnitState::kGathering) finish_gather(static_cast<int>(v));
    u.secondary = false;
    for (int gi : u.groups) secondary_shards_[gi] = at::Tensor();
  }
}

bool Stage3::reused_soon(int unit, size_t pos) const {
  // A forward without autograd (evaluation) has no backward part to reuse units in.
  const size_t end = at::GradMode::is_enabled() ? step_trace_.size() : trace_.size();
  int64_t between_numel = 0;
  for (size_t i = pos + 1; i < end; ++i) {
    if (between_numel >= options_.max_reuse_distance_numel) return false;
    if (step_trace_[i] == unit) return true;
    between_numel += units_[step_trace_[i]].numel;
  }
  return false;
}

void Stage3::evict_kept(int64_t numel) {
  for (size_t v = 0; v < units_.size(); ++v) {
    if (live_numel_ + numel <= options_.max_live_numel) return;
    if (units_[v].kept) release(static_cast<int>(v));
  }
}

void Stage3::prefetch(const std::vector<int>& candidates, int current) {
  int64_t budget = options_.prefetch_numel;
  for (int v : candidates) {
    if (v == current || units_[v].state != UnitState::kReleased) continue;
    if (units_[v].numel > budget || live_numel_ + units_[v].numel > options_.max_live_numel) break;
    start_gather(v);
    budget -= units_[v].numel;
  }
  // Offloaded shards of the units after those: reads start into free swap-in buffers.
  if (options_.param_store)
    for (int v : candidates)
      if (units_[v].state == UnitState::kReleased)
        for (int gi : units_[v].groups) options_.param_store->prefetch(gi);
}

void Stage3::pre_forward(int unit) {
  ZERO_ASSERT(unit > 0 && unit < static_cast<int>(units_.size()), "unit ", unit);
  if (held_) return;  // gathered already; a pipeline's order is no trace to record
  // An activation checkpoint recomputing the block: its backward follows at once, so it stays
  // gathered until its gradients are in, and the forward trace is left alone.
  if (in_backward_) {
    units_[unit].kept = false;
    finish_gather(unit);
    return;
  }
  if (!trace_valid_) {
    recording_.push_back(unit);
  } else if (trace_pos_ < trace_.size() && trace_[trace_pos_] == unit) {
    ++trace_pos_;
  } else if (!trace_.empty() && trace_[0] == unit) {
    trace_pos_ = 1;
  } else {
    spdlog::debug("[rank {}] stage 3: unit order changed; recording it again", rank_);
    trace_valid_ = false;
    recording_ = {unit};
  }
  units_[unit].kept = false;
  finish_gather(unit);
  if (trace_valid_) {
    std::vector<int> next(trace_.begin() + trace_pos_, trace_.end());
    prefetch(next, unit);
  }
}

void Stage3::post_forward(int unit) {
  if (in_backward_ || held_) return;  // a recompute: after_grad releases the block
  // Without a trace (the first pass, or the order changed) nothing is known about reuse.
  const bool traced = trace_valid_ && trace_pos_ > 0 && trace_[trace_pos_ - 1] == unit;
  if (traced && reused_soon(unit, trace_pos_ - 1))
    units_[unit].kept = true;
  else
    release(unit);
}

void Stage3::pre_backward(int unit) {
  if (held_) return;
  units_[unit].kept = false;
  finish_gather(unit);
  if (!trace_valid_) return;
  // This use's place in the backward half of the step trace (a block run twice has two).
  const auto backward_begin = step_trace_.begin() + static_cast<std::ptrdiff_t>(trace_.size());
  auto it = std::find(step_trace_.begin() + static_cast<std::ptrdiff_t>(backward_pos_),
                      step_trace_.end(), unit);
  if (it == step_trace_.end()) it = std::find(backward_begin, step_trace_.end(), unit);
  if (it == step_trace_.end()) return;
  backward_pos_ = static_cast<size_t>(it - step_trace_.begin()) + 1;
  prefetch(std::vector<int>(it + 1, step_trace_.end()), unit);
}

void Stage3::start_backward(bool boundary) {
  FlatStage::start_backward(boundary);
  boundary_ = boundary;
  in_backward_ = true;
  for (auto& u : units_) u.arrived_grads = 0;
  if (!trace_valid_ && !recording_.empty()) {
    trace_ = recording_;
    trace_valid_ = true;
    recording_.clear();
    step_trace_ = trace_;
    step_trace_.insert(step_trace_.end(), trace_.rbegin(), trace_.rend());
  }
  trace_pos_ = 0;
  backward_pos_ = trace_.size();
}

void Stage3::after_grad(int param) {
  const ParamSpec& p = layout_.params()[param];
  if (p.persistent) return;
  Unit& u = units_[p.unit];
  if (++u.arrived_grads == u.expected_grads) release(p.unit);
}

void Stage3::finish_backward() {
  FlatStage::finish_backward();
  in_backward_ = false;
  for (size_t u = 0; u < units_.size(); ++u) release(static_cast<int>(u));
  if (!boundary_) finish_gather(0);  // the next forward starts outside any wrapped block
}

void Stage3::gather_all() {
  // The caller sees (and may change) the exact values: units gathered through qwZ again.
  for (size_t u = 0; u < units_.size(); ++u)
    if (units_[u].quantized_values) release(static_cast<int>(u));
  drop_secondaries();
  for (size_t u = 0; u < units_.size(); ++u) start_gather(static_cast<int>(u), /*exact=*/true);
  for (size_t u = 0; u < units_.size(); ++u) finish_gather(static_cast<int>(u));
}

void Stage3::release_all() {
  for (size_t u = 1; u < units_.size(); ++u) release(static_cast<int>(u));
  // Every block gathered at once is no step's need: none of that memory is kept for the next
  // gathers (it would stay beside them, unused, when fewer blocks are live in a step).
  parked_.clear();
  parked_bytes_ = 0;
  // The rest of the model as training sees it: through qwZ, as after a step.
  if (options_.quantized_weights && world_ > 1 && !held_ && !units_[0].quantized_values) {
    release(0);
    finish_gather(0);
  }
}

void Stage3::zero_grad() {
  drop_secondaries();
  FlatStage::zero_grad();
}

void Stage3::hold_gathered(bool hold) {
  if (hold == held_) return;
  if (hold) gather_all();
  held_ = hold;
  if (!hold) release_all();
}

StageMemory Stage3::memory() const {
  StageMemory m = FlatStage::memory();
  m.unit_gathers = gathers_;
  m.secondary_gathers = secondary_gathers_;
  for (const at::Tensor& t : secondary_shards_)
    if (t.defined()) m.secondary_params_bytes += t.nbytes();
  if (options_.param_store) m.offloaded_params = options_.param_store->memory();
  // A gather in flight holds a view of one of these buffers as param_shard: counted once, here.
  for (const at::Tensor& b : shard_buffers_) m.comm_buffers_bytes += b.nbytes();
  m.kept_params_bytes = parked_bytes_;
  if (options_.param_store)
    for (const GroupBuffers& b : groups_)
      if (b.sharded_params && b.param_shard.defined()) m.parameters_bytes -= b.param_shard.nbytes();
  return m;
}

void Stage3::publish_parameters() {
  drop_secondaries();
  publish_groups(/*sharded_too=*/false);
  if (shared_params_) return;  // nothing is released, nothing to gather
  // Sharded groups: the optimizer wrote the new values into param_shard (param16), or into the
  // parameter store itself (offloaded optimizer); an optimizer on the device updated only the
  // master, which goes to the store here.
  if (options_.param_store && !options_.offload_optimizer) write_masters_to_store();
  release(0);
  finish_gather(0);
  // The next forward's first blocks: their gathers run while the program gets its next batch,
  // instead of the forward waiting for the first one.
  if (trace_valid_ && !held_) prefetch(trace_, 0);
}

}  // namespace zero::detail
