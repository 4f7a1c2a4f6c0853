// Engine::full_parameters (and save_16bit_model's buffers) on a pipeline: each stage holds only
// its layers, so every stage in turn broadcasts its tensors (names, dtypes and shapes as text,
// the values as one flat tensor per dtype) over the pipeline group; the result is in layer
// order, as one process names them.
#include "engine_impl.h"
#include "save_load/io.h"

#include <zero/engine/pipe/module.h>
#include <zero/error.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <unordered_set>

namespace zero::detail {

std::vector<std::pair<std::string, at::Tensor>> pipeline_gather_stages(
    const Engine::Impl& s, std::vector<std::pair<std::string, at::Tensor>> own) {
  Communicator& pipe_group = *s.pipe_group;
  const at::Device device = s.params[0].device();
  // "name dtype rank d0 d1 ...\n" per tensor.
  std::ostringstream text;
  for (const auto& [name, value] : own) {
    text << name << ' ' << static_cast<int>(value.scalar_type()) << ' ' << value.dim();
    for (int64_t d : value.sizes()) text << ' ' << d;
    text << '\n';
  }
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (int stage = 0; stage < s.pipeline_size; ++stage) {
    const bool mine = stage == pipe_group.rank();
    std::istringstream lines(broadcast_text(pipe_group, mine ? text.str() : "", stage, device));
    struct Meta {
      std::string name;
      at::ScalarType dtype;
      std::vector<int64_t> sizes;
      int64_t numel = 1, offset = 0;  // in the flat tensor of its dtype
    };
    std::vector<Meta> metas;
    std::map<at::ScalarType, int64_t> totals;  // one flat tensor per dtype, in a fixed order
    for (std::string name; lines >> name;) {
      int dtype = 0;
      int64_t dims = 0;
      lines >> dtype >> dims;
      Meta m{std::move(name), static_cast<at::ScalarType>(dtype), {}, 1, 0};
      m.sizes.resize(static_cast<size_t>(dims));
      for (int64_t& d : m.sizes) lines >> d, m.numel *= d;
      m.offset = totals[m.dtype];
      totals[m.dtype] += m.numel;
      metas.push_back(std::move(m));
    }
    std::map<at::ScalarType, at::Tensor> flats;
    for (const auto& [dtype, total] : totals) {
      if (total == 0) continue;
      at::Tensor values;
      if (mine) {
        std::vector<at::Tensor> pieces;
        for (const auto& [name, value] : own)
          if (value.scalar_type() == dtype) pieces.push_back(value.detach().reshape({-1}));
        values = at::cat(pieces);
      } else {
        values = at::empty({total}, at::TensorOptions().dtype(dtype).device(device));
      }
      pipe_group.broadcast(values, stage)->wait();
      flats[dtype] = values;
    }
    for (Meta& m : metas)
      out.emplace_back(std::move(m.name),
                       m.numel == 0
                           ? at::empty(m.sizes, at::TensorOptions().dtype(m.dtype))
                           : flats.at(m.dtype).narrow(0, m.offset, m.numel).view(m.sizes).clone());
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return pipe::layer_index(a.first) < pipe::layer_index(b.first);
  });
  // A tied module's copies carry one name (its key's first layer): keep one.
  std::vector<std::pair<std::string, at::Tensor>> unique;
  std::unordered_set<std::string> seen;
  for (auto& item : out)
    if (seen.insert(item.first).second) unique.push_back(std::move(item));
  return unique;
}

}  // namespace zero::detail
