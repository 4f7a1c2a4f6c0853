// Engine::full_parameters on a pipeline: each stage holds only its layers, so every stage in
// turn broadcasts its whole parameters (names and shapes as text, the values as one flat
// tensor) over the pipeline group; the result is in layer order, as one process names them.
#include "engine_impl.h"
#include "save_load/io.h"

#include <zero/engine/pipe/module.h>
#include <zero/error.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <sstream>
#include <unordered_set>

namespace zero::detail {
namespace {

// "layers.12.fc.weight" -> 12.
int layer_of(const std::string& name) {
  const size_t begin = name.find('.') + 1, end = name.find('.', begin);
  return std::stoi(name.substr(begin, end - begin));
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> pipeline_full_parameters(
    const Engine::Impl& s, std::vector<std::pair<std::string, at::Tensor>> own) {
  Communicator& pipe_group = *s.pipe_group;
  const at::Device device = s.params[0].device();
  const at::ScalarType dtype = s.params[0].scalar_type();
  // "name rank d0 d1 ...\n" per parameter.
  std::ostringstream text;
  std::vector<at::Tensor> flat;
  for (const auto& [name, value] : own) {
    ZERO_ASSERT(value.scalar_type() == dtype, name, " is ", value.scalar_type(), ", not ", dtype);
    text << name << ' ' << value.dim();
    for (int64_t d : value.sizes()) text << ' ' << d;
    text << '\n';
    flat.push_back(value.reshape({-1}));
  }
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (int stage = 0; stage < s.pipeline_size; ++stage) {
    const bool mine = stage == pipe_group.rank();
    std::istringstream lines(broadcast_text(pipe_group, mine ? text.str() : "", stage, device));
    struct Meta {
      std::string name;
      std::vector<int64_t> sizes;
      int64_t numel = 1;
    };
    std::vector<Meta> metas;
    int64_t total = 0;
    for (std::string name; lines >> name;) {
      Meta m{std::move(name), {}, 1};
      int64_t dims = 0;
      lines >> dims;
      m.sizes.resize(static_cast<size_t>(dims));
      for (int64_t& d : m.sizes) lines >> d, m.numel *= d;
      total += m.numel;
      metas.push_back(std::move(m));
    }
    if (total == 0) continue;  // a stage of layers without trainable parameters
    const at::TensorOptions options = at::TensorOptions().dtype(dtype).device(device);
    at::Tensor values = mine ? at::cat(flat) : at::empty({total}, options);
    pipe_group.broadcast(values, stage)->wait();
    int64_t offset = 0;
    for (Meta& m : metas) {
      out.emplace_back(std::move(m.name), values.narrow(0, offset, m.numel).view(m.sizes).clone());
      offset += m.numel;
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return layer_of(a.first) < layer_of(b.first);
  });
  // A tied module's copies carry one name (its key's first layer): keep one.
  std::vector<std::pair<std::string, at::Tensor>> unique;
  std::unordered_set<std::string> seen;
  for (auto& item : out)
    if (seen.insert(item.first).second) unique.push_back(std::move(item));
  return unique;
}

}  // namespace zero::detail
