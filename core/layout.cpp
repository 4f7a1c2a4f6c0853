// FlatLayout::build and its queries: pure arithmetic on parameter sizes, no tensors, so it is
// tested exhaustively without processes (odd world sizes, empty shards, huge parameters).
#include <zero/core/layout.h>
#include <zero/error.h>

#include <map>
#include <numeric>
#include <sstream>
#include <tuple>

namespace zero {
namespace {

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

void fnv(uint64_t& h, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
}
template <typename T>
void fnv(uint64_t& h, const T& value) {
  fnv(h, &value, sizeof(T));
}

}  // namespace

FlatLayout FlatLayout::build(const std::vector<ParamSpec>& params, const LayoutOptions& options) {
  ZERO_CHECK(options.world_size >= 1, UsageError, "FlatLayout: world_size must be >= 1, got ",
             options.world_size);
  ZERO_CHECK(options.align_bytes >= 1, UsageError, "FlatLayout: align_bytes must be >= 1");
  FlatLayout layout;
  layout.options_ = options;
  layout.params_ = params;
  layout.slots_.resize(params.size());

  // Groups keyed by (unit, persistent, dtype, tensor split, tied copy), in order of first
  // appearance.
  std::map<std::tuple<int, bool, int, bool, bool>, int> group_of;
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSpec& p = params[i];
    ZERO_CHECK(p.numel > 0, UsageError, "FlatLayout: parameter '", p.name, "' has ", p.numel,
               " elements; only non-empty parameters can be partitioned");
    auto key = std::make_tuple(p.unit, p.persistent, static_cast<int>(p.dtype), p.tensor_split,
                               p.tied_copy);
    auto it = group_of.find(key);
    if (it == group_of.end()) {
      it = group_of.emplace(key, static_cast<int>(layout.groups_.size())).first;
      Group g;
      g.dtype = p.dtype;
      g.unit = p.unit;
      g.persistent = p.persistent;
      g.tensor_split = p.tensor_split;
      g.tied_copy = p.tied_copy;
      layout.groups_.push_back(g);
    }
    layout.groups_[it->second].params.push_back(static_cast<int>(i));
  }

  for (size_t gi = 0; gi < layout.groups_.size(); ++gi) {
    Group& g = layout.groups_[gi];
    const int64_t elem_bytes = float_type_bytes(g.dtype);
    const int64_t align = std::max<int64_t>(1, options.align_bytes / elem_bytes);
    int64_t offset = 0;
    Bucket bucket;
    bucket.group = static_cast<int>(gi);
    auto close_bucket = [&] {
      if (bucket.params.empty()) return;
      g.buckets.push_back(static_cast<int>(layout.buckets_.size()));
      layout.buckets_.push_back(bucket);
      bucket.params.clear();
    };
    for (int pi : g.params) {
      const ParamSpec& p = params[pi];
      offset = round_up(offset, align);
      const BufferRange range{offset, offset + p.numel};
      if (!bucket.params.empty() && options.bucket_numel > 0 &&
          range.end - bucket.buffer.begin > options.bucket_numel) {
        close_bucket();
      }
      if (bucket.params.empty()) bucket.buffer = BufferRange{range.begin, range.begin};
      bucket.params.push_back(pi);
      bucket.buffer.end = range.end;
      layout.slots_[pi] =
          ParamSlot{static_cast<int>(gi), static_cast<int>(layout.buckets_.size()), range};
      offset = range.end;
    }
    close_bucket();
    g.used_numel = offset;
    const int64_t shard_multiple =
        std::lcm(align, std::max<int64_t>(1, options.shard_multiple_numel));
    g.padded_numel = round_up(std::max<int64_t>(offset, 1), options.world_size * shard_multiple);
    g.shard_numel = g.padded_numel / options.world_size;
  }
  return layout;
}

std::optional<ShardPiece> FlatLayout::shard_piece(int param, int rank) const {
  ZERO_ASSERT(param >= 0 && param < static_cast<int>(slots_.size()), "param ", param);
  const ParamSlot& slot = slots_[param];
  const Group& g = groups_[slot.group];
  const BufferRange shard = g.shard(rank);
  const BufferRange overlap = slot.buffer.intersect(shard);
  if (overlap.empty()) return std::nullopt;
  return ShardPiece{overlap.relative_to<ParamSpace>(slot.buffer.begin),
                    overlap.relative_to<ShardSpace>(shard.begin)};
}

std::vector<int64_t> FlatLayout::bucket_counts(int bucket) const {
  const Bucket& b = buckets_.at(bucket);
  const Group& g = groups_[b.group];
  std::vector<int64_t> counts(options_.world_size);
  for (int r = 0; r < options_.world_size; ++r) counts[r] = b.buffer.intersect(g.shard(r)).numel();
  return counts;
}

ShardRange FlatLayout::bucket_shard_range(int bucket, int rank) const {
  const Bucket& b = buckets_.at(bucket);
  const BufferRange shard = groups_[b.group].shard(rank);
  const BufferRange overlap = b.buffer.intersect(shard);
  if (overlap.empty()) return ShardRange{};
  return overlap.relative_to<ShardSpace>(shard.begin);
}

int64_t FlatLayout::total_padded_numel() const {
  int64_t n = 0;
  for (const Group& g : groups_) n += g.padded_numel;
  return n;
}

uint64_t FlatLayout::hash() const {
  uint64_t h = 1469598103934665603ull;
  fnv(h, options_.world_size);
  fnv(h, options_.align_bytes);
  // Only when set: the fingerprints of the other layouts stay.
  if (options_.shard_multiple_numel != 1) fnv(h, options_.shard_multiple_numel);
  fnv(h, options_.bucket_numel);
  for (const ParamSpec& p : params_) {
    fnv(h, p.name.data(), p.name.size());
    fnv(h, p.numel);
    fnv(h, static_cast<int>(p.dtype));
    fnv(h, p.unit);
    fnv(h, p.persistent);
    fnv(h, p.tensor_split);
    if (p.tied_copy) fnv(h, 1);  // only then: the fingerprints of layouts without ties stay
  }
  return h;
}

std::string FlatLayout::describe() const {
  std::ostringstream out;
  out << "FlatLayout(world_size=" << options_.world_size << ", " << params_.size() << " params, "
      << groups_.size() << " groups, " << buckets_.size() << " buckets)";
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const Group& g = groups_[gi];
    out << "\n  group " << gi << ": unit " << g.unit << (g.persistent ? " persistent" : "")
        << (g.tensor_split ? " tensor-split" : "") << (g.tied_copy ? " tied-copy" : "") << ", "
        << float_type_name(g.dtype) << ", " << g.params.size() << " params, used " << g.used_numel
        << ", padded " << g.padded_numel << ", shard " << g.shard_numel;
  }
  return out.str();
}

}  // namespace zero
