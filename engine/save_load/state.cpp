// The mapping between layout shards and checkpoint pieces, and the names and hashes that the
// manifest records.
#include "save_load/state.h"

#include <zero/config/config.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <unordered_set>

namespace zero::detail {

namespace {

// Rank `rank`'s shard of every parameter; state offsets in the group's whole buffer (stage 0's
// state tensors) or in the rank's shard.
std::vector<StatePiece> shard_pieces(const FlatLayout& layout, int rank, bool offsets_in_buffer) {
  std::vector<StatePiece> out;
  for (size_t pi = 0; pi < layout.params().size(); ++pi) {
    const auto piece = layout.shard_piece(static_cast<int>(pi), rank);
    if (!piece || piece->in_param.empty()) continue;
    const int group = layout.slots()[pi].group;
    const int64_t base = offsets_in_buffer ? layout.groups()[group].shard(rank).begin : 0;
    out.push_back({static_cast<int>(pi), group, piece->in_param.begin, piece->in_param.end,
                   base + piece->in_shard.begin});
  }
  return out;
}

}  // namespace

std::vector<StatePiece> saved_pieces(const FlatLayout& layout, int stage, int rank) {
  return shard_pieces(layout, rank, /*offsets_in_buffer=*/stage == 0);
}

std::vector<StatePiece> saved_pieces(const Engine::Impl& s, int data_rank, int tensor_rank) {
  std::vector<StatePiece> out;
  const FlatLayout& layout = s.stage->layout();
  // MiCS: the data ranks past the first shard group hold copies of its shards.
  if (data_rank >= layout.world_size()) return out;
  for (const StatePiece& p : saved_pieces(layout, s.stage->stage(), data_rank))
    // A tied copy is saved by its tie's first stage, under the same name.
    if ((tensor_rank == 0 || split_of(s, p.param)) &&
        !layout.groups()[layout.slots()[p.param].group].tied_copy)
      out.push_back(p);
  return out;
}

const SplitLayout* split_of(const Engine::Impl& s, int param) {
  if (s.tensor_size == 1) return nullptr;
  const auto it = s.split_dims.find(s.params.at(param).unsafeGetTensorImpl());
  return it == s.split_dims.end() ? nullptr : &it->second;
}

std::vector<int64_t> whole_shape(const Engine::Impl& s, int param) {
  const at::Tensor& p = s.params.at(param);
  std::vector<int64_t> shape(p.sizes().begin(), p.sizes().end());
  if (const SplitLayout* split = split_of(s, param)) shape[split->dim] *= s.tensor_size;
  return shape;
}

std::vector<StatePiece> held_pieces(const FlatLayout& layout, int stage, int rank) {
  if (stage != 0) return shard_pieces(layout, rank, /*offsets_in_buffer=*/false);
  std::vector<StatePiece> out;
  for (size_t pi = 0; pi < layout.params().size(); ++pi) {
    const ParamSlot& slot = layout.slots()[pi];
    if (slot.buffer.empty()) continue;
    out.push_back({static_cast<int>(pi), slot.group, 0, slot.buffer.numel(), slot.buffer.begin});
  }
  return out;
}

std::vector<ParamPart> unheld_parts(const FlatLayout& layout, int rank) {
  std::vector<ParamPart> out;
  for (size_t pi = 0; pi < layout.params().size(); ++pi) {
    const int param = static_cast<int>(pi);
    const ParamRange all{0, layout.slots()[pi].buffer.numel()};
    const auto piece = layout.shard_piece(param, rank);
    const ParamRange mine = piece ? piece->in_param : ParamRange{};
    if (mine.empty()) {
      if (!all.empty()) out.push_back({param, all});
      continue;
    }
    if (mine.begin > all.begin) out.push_back({param, {all.begin, mine.begin}});
    if (mine.end < all.end) out.push_back({param, {mine.end, all.end}});
  }
  return out;
}

std::string precision_name(at::ScalarType t) {
  return t == at::kHalf ? "fp16" : t == at::kBFloat16 ? "bf16" : "fp32";
}

std::string safetensors_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "F32";
    case at::kDouble:
      return "F64";
    case at::kHalf:
      return "F16";
    case at::kBFloat16:
      return "BF16";
    case at::kLong:
      return "I64";
    case at::kInt:
      return "I32";
    case at::kShort:
      return "I16";
    case at::kChar:
      return "I8";
    case at::kByte:
      return "U8";
    case at::kBool:
      return "BOOL";
    default:
      throw UsageError(zero::detail::str("checkpoint: tensors of dtype ", t, " cannot be saved"));
  }
}

at::ScalarType scalar_type_of(const std::string& d) {
  if (d == "F32") return at::kFloat;
  if (d == "F64") return at::kDouble;
  if (d == "F16") return at::kHalf;
  if (d == "BF16") return at::kBFloat16;
  if (d == "I64") return at::kLong;
  if (d == "I32") return at::kInt;
  if (d == "I16") return at::kShort;
  if (d == "I8") return at::kChar;
  if (d == "U8") return at::kByte;
  if (d == "BOOL") return at::kBool;
  throw CheckpointError(zero::detail::str("checkpoint: unknown dtype '", d, "'"));
}

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string config_hash(const Config& config) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx",
                static_cast<unsigned long long>(fnv1a(to_json_string(config, -1))));
  return buf;
}

std::vector<std::pair<std::string, at::Generator>> rng_generators(at::Device param_device) {
  std::vector<std::pair<std::string, at::Generator>> out{
      {ckpt::kRngTensor, at::detail::getDefaultCPUGenerator()}};
  if (param_device.is_cuda())
    out.emplace_back(ckpt::kCudaRngTensor, at::globalContext().defaultGenerator(param_device));
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> module_buffers(const Engine::Impl& impl) {
  std::unordered_set<const c10::TensorImpl*> trained;
  for (const auto& p : impl.params) trained.insert(p.unsafeGetTensorImpl());
  std::vector<std::pair<std::string, at::Tensor>> out;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& item : impl.model->named_parameters(/*recurse=*/true)) {
    const at::Tensor& p = item.value();
    if (trained.count(p.unsafeGetTensorImpl()) || !seen.insert(p.unsafeGetTensorImpl()).second)
      continue;
    out.emplace_back(item.key(), p);
  }
  for (const auto& item : impl.model->named_buffers(/*recurse=*/true))
    if (item.value().defined() && seen.insert(item.value().unsafeGetTensorImpl()).second)
      out.emplace_back(item.key(), item.value());
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> whole_module_buffers(const Engine::Impl& impl) {
  std::vector<std::pair<std::string, at::Tensor>> out = module_buffers(impl);
  for (auto& [name, t] : out)
    if (auto it = impl.split_dims.find(t.unsafeGetTensorImpl());
        impl.tensor_size > 1 && it != impl.split_dims.end())
      t = whole_of_slices(*impl.tensor, t, it->second);
  return out;
}

}  // namespace zero::detail
