// Half-open element ranges, one type per index space (buffer, shard, parameter, bucket),
// so an offset in one space cannot be passed where another is meant without a named conversion.
#pragma once

#include <algorithm>
#include <cstdint>
#include <ostream>

namespace zero {

struct BufferSpace {};  // offsets into one group's flat buffer (all ranks' shards, padded)
struct ShardSpace {};   // offsets into one rank's shard of a group
struct ParamSpace {};   // element offsets inside one parameter (flattened)
struct BucketSpace {};  // offsets inside one bucket's staging buffer

template <typename Space>
struct Range {
  int64_t begin = 0;
  int64_t end = 0;  // exclusive

  int64_t numel() const { return end > begin ? end - begin : 0; }
  bool empty() const { return end <= begin; }
  bool contains(int64_t index) const { return index >= begin && index < end; }
  // The overlap of two ranges of the same space; empty (begin == end) when disjoint.
  Range intersect(const Range& other) const {
    int64_t b = std::max(begin, other.begin);
    int64_t e = std::min(end, other.end);
    return e > b ? Range{b, e} : Range{b, b};
  }
  // Re-expresses this range in another space whose origin lies at `origin` of this space.
  template <typename To>
  Range<To> relative_to(int64_t origin) const {
    return Range<To>{begin - origin, end - origin};
  }
  bool operator==(const Range& other) const { return begin == other.begin && end == other.end; }
  bool operator!=(const Range& other) const { return !(*this == other); }
};

using BufferRange = Range<BufferSpace>;
using ShardRange = Range<ShardSpace>;
using ParamRange = Range<ParamSpace>;
using BucketRange = Range<BucketSpace>;

template <typename Space>
std::ostream& operator<<(std::ostream& out, const Range<Space>& r) {
  return out << "[" << r.begin << ", " << r.end << ")";
}

}  // namespace zero
