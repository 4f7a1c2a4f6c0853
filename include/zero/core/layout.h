// FlatLayout: where every trainable parameter lives, computed as a plain value before any
// allocation: groups (one flat buffer per unit and dtype), shards per rank, gradient buckets.
#pragma once

#include <zero/core/float_type.h>
#include <zero/core/range.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zero {

// One parameter as the layout sees it (no tensor: the layout is pure data).
struct ParamSpec {
  std::string name;
  int64_t numel = 0;
  FloatType dtype = FloatType::kFloat32;
  int unit = 0;             // sharding unit (stage 3: a wrapped block; 0 otherwise)
  bool persistent = false;  // stage 3: kept whole between uses (small parameters)
  // Split over the tensor-parallel group (each tensor rank holds another slice); false: the same
  // values on every tensor rank. The gradient norm counts a split group on every tensor rank, a
  // replicated one once.
  bool tensor_split = false;
  // A pipeline stage's copy of a parameter another stage also holds (a tied layer's), whose
  // gradient norm that other stage counts.
  bool tied_copy = false;
};

struct LayoutOptions {
  int world_size = 1;
  int64_t align_bytes = 16;  // every parameter and every shard starts at this alignment
  int64_t bucket_numel = 0;  // gradient bucket capacity in elements; <= 0: one bucket per group
  // Every shard's numel is a multiple of this too (qwZ quantizes shards in blocks of 8 elements).
  int64_t shard_multiple_numel = 1;
};

// Where a parameter lies in its group's flat buffer.
struct ParamSlot {
  int group = -1;
  int bucket = -1;
  BufferRange buffer;  // numel() == the parameter's numel
};

// The part of one parameter that falls in one rank's shard.
struct ShardPiece {
  ParamRange in_param;  // which elements of the parameter
  ShardRange in_shard;  // where they sit in the rank's shard
};

// A flat buffer: all parameters of one (unit, dtype, persistence), padded so that it splits
// into world_size equal, aligned shards. Rank r owns buffer elements [r*shard, (r+1)*shard).
struct Group {
  FloatType dtype = FloatType::kFloat32;
  int unit = 0;
  bool persistent = false;
  bool tensor_split = false;  // its parameters are tensor-parallel slices (ParamSpec)
  bool tied_copy = false;     // its parameters are tied copies (ParamSpec)
  std::vector<int> params;    // indices into FlatLayout::params(), in buffer order
  std::vector<int> buckets;   // indices into FlatLayout::buckets(), in buffer order
  int64_t used_numel = 0;     // end of the last parameter (alignment gaps included)
  int64_t padded_numel = 0;   // multiple of world_size * alignment
  int64_t shard_numel = 0;    // padded_numel / world_size

  BufferRange shard(int rank) const { return {rank * shard_numel, (rank + 1) * shard_numel}; }
};

// Consecutive parameters of one group whose gradients are reduced together.
struct Bucket {
  int group = -1;
  BufferRange buffer;       // from the first parameter's start to the last one's end
  std::vector<int> params;  // indices into FlatLayout::params()
};

class FlatLayout {
 public:
  // Parameters keep the given order inside their group (the engine passes them in expected
  // gradient-arrival order, so buckets fill one after another). Throws UsageError on bad input.
  static FlatLayout build(const std::vector<ParamSpec>& params, const LayoutOptions& options);

  int world_size() const { return options_.world_size; }
  const LayoutOptions& options() const { return options_; }
  const std::vector<ParamSpec>& params() const { return params_; }
  const std::vector<ParamSlot>& slots() const { return slots_; }
  const std::vector<Group>& groups() const { return groups_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }

  // The part of parameter `param` inside rank `rank`'s shard, if any.
  std::optional<ShardPiece> shard_piece(int param, int rank) const;
  // Elements of bucket `bucket` that fall in each rank's shard (the counts of a
  // reduce_scatter_v over the bucket's buffer range); may contain zeros.
  std::vector<int64_t> bucket_counts(int bucket) const;
  // Where rank `rank`'s part of bucket `bucket` sits in its shard (empty when none).
  ShardRange bucket_shard_range(int bucket, int rank) const;
  // Sum of all groups' padded_numel.
  int64_t total_padded_numel() const;
  // A hash of everything that must agree across ranks (names, sizes, dtypes, units, options).
  uint64_t hash() const;
  std::string describe() const;

 private:
  LayoutOptions options_;
  std::vector<ParamSpec> params_;
  std::vector<ParamSlot> slots_;
  std::vector<Group> groups_;
  std::vector<Bucket> buckets_;
};

}  // namespace zero
