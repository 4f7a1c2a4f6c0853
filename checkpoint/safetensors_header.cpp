// The safetensors header parser: dtype names and sizes, then a strict validation of an untrusted
// JSON header (duplicate keys, exact entry schema, sizes, bounds, overlaps) into TensorInfos.
#include <algorithm>
#include <iterator>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "safetensors_detail.h"

namespace zero::ckpt {

namespace {

struct DTypeRow {
  DType dtype;
  const char* name;
  int64_t bytes;
};
constexpr DTypeRow kDTypes[] = {
    {DType::kF64, "F64", 8},   {DType::kF32, "F32", 4}, {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2}, {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},   {DType::kI8, "I8", 1},   {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1},
};

const DTypeRow& row(DType dtype) {
  auto i = static_cast<size_t>(dtype);
  ZERO_ASSERT(i < std::size(kDTypes) && kDTypes[i].dtype == dtype, "unknown DType ", i);
  return kDTypes[i];
}

constexpr size_t kMaxDepth = 16;  // the schema needs 3; deeper input is rejected early

// First pass over the header: nlohmann's DOM keeps only one of two equal keys, and a duplicate
// is a way to smuggle a second definition past a reader, so duplicates are found here.
class KeyChecker {
 public:
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(nlohmann::json::number_integer_t) { return true; }
  bool number_unsigned(nlohmann::json::number_unsigned_t) { return true; }
  bool number_float(nlohmann::json::number_float_t, const std::string&) { return true; }
  bool string(std::string&) { return true; }
  bool binary(nlohmann::json::binary_t&) { return true; }
  bool start_object(size_t) { return push(true); }
  bool end_object() { return pop(); }
  bool start_array(size_t) { return push(false); }
  bool end_array() { return pop(); }
  bool key(std::string& k) {
    if (levels_.size() == 1) top_key_ = k;
    if (levels_.back().keys.insert(k).second) return true;
    error_ = "duplicate key " + detail::quoted(k);
    if (levels_.size() > 1) error_ += " in entry " + detail::quoted(top_key_);
    return false;
  }
  bool parse_error(size_t, const std::string&, const nlohmann::json::exception& e) {
    error_ = std::string("not valid JSON: ") + e.what();
    return false;
  }
  const std::string& error() const { return error_; }

 private:
  struct Level {
    bool object;
    std::set<std::string> keys;
  };
  bool push(bool object) {
    if (levels_.size() >= kMaxDepth) {
      error_ = "nested more than 16 levels deep";
      return false;
    }
    levels_.push_back(Level{object, {}});
    return true;
  }
  bool pop() {
    levels_.pop_back();
    return true;
  }
  std::vector<Level> levels_;
  std::string top_key_;
  std::string error_;
};

using Json = nlohmann::ordered_json;  // keeps the header's order

// A JSON value from the file as shown in a message: at most 100 characters of it.
std::string shown(const Json& v) {
  std::string s = v.dump();
  return s.size() > 100 ? s.substr(0, 100) + "..." : s;
}

// A non-negative integer that fits int64, or nullopt.
std::optional<int64_t> as_index(const Json& v) {
  if (!v.is_number_unsigned()) return std::nullopt;
  auto u = v.get<uint64_t>();
  if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return static_cast<int64_t>(u);
}

TensorInfo parse_entry(const std::string& name, const Json& v, int64_t data_bytes,
                       const std::string& what) {
  const std::string tensor = "tensor " + detail::quoted(name) + ": ";
  if (name.empty()) throw detail::checkpoint_error(what, "header: a tensor has an empty name");
  if (!v.is_object())
    throw detail::checkpoint_error(what, tensor, "entry is not an object but ", v.type_name());
  for (const auto& item : v.items()) {
    const std::string& k = item.key();
    if (k != "dtype" && k != "shape" && k != "data_offsets")
      throw detail::checkpoint_error(what, tensor, "unknown key ", detail::quoted(k),
                                     " (an entry holds exactly dtype, shape, data_offsets)");
  }
  for (const char* k : {"dtype", "shape", "data_offsets"})
    if (!v.contains(k)) throw detail::checkpoint_error(what, tensor, "missing key '", k, "'");

  TensorInfo t;
  t.name = name;
  const Json& dtype = v["dtype"];
  std::optional<DType> parsed =
      dtype.is_string() ? parse_dtype(dtype.get_ref<const std::string&>()) : std::nullopt;
  if (!parsed)
    throw detail::checkpoint_error(
        what, tensor, "unsupported dtype ",
        dtype.is_string() ? detail::quoted(dtype.get<std::string>()) : shown(dtype));
  t.dtype = *parsed;

  const Json& shape = v["shape"];
  if (!shape.is_array())
    throw detail::checkpoint_error(what, tensor, "shape is not an array of integers");
  for (const Json& d : shape) {
    std::optional<int64_t> dim = as_index(d);
    if (!dim)
      throw detail::checkpoint_error(what, tensor, "shape entry ", shown(d),
                                     " is not a non-negative 64-bit integer");
    t.shape.push_back(*dim);
  }
  std::optional<int64_t> nbytes = detail::checked_nbytes(t.shape, t.dtype);
  if (!nbytes)
    throw detail::checkpoint_error(what, tensor, "shape ", detail::shape_text(t.shape), " x ",
                                   dtype_name(t.dtype), " overflows 64 bits");

  const Json& offsets = v["data_offsets"];
  std::optional<int64_t> begin, end;
  if (offsets.is_array() && offsets.size() == 2)
    begin = as_index(offsets[0]), end = as_index(offsets[1]);
  if (!begin || !end)
    throw detail::checkpoint_error(what, tensor, "data_offsets ", shown(offsets),
                                   " is not two non-negative 64-bit integers");
  t.begin = *begin;
  t.end = *end;
  if (t.end < t.begin)
    throw detail::checkpoint_error(what, tensor, "data_offsets [", t.begin, ", ", t.end,
                                   ") end before they begin");
  if (t.end - t.begin != *nbytes)
    throw detail::checkpoint_error(what, tensor, "data [", t.begin, ", ", t.end, ") holds ",
                                   t.end - t.begin, " bytes but shape ",
                                   detail::shape_text(t.shape), " x ", dtype_name(t.dtype),
                                   " needs ", *nbytes);
  if (t.end > data_bytes)
    throw detail::checkpoint_error(what, tensor, "data [", t.begin, ", ", t.end,
                                   ") lies outside the file's ", data_bytes,
                                   " data bytes (truncated or corrupted file)");
  return t;
}

void parse_metadata(const Json& v, const std::string& what,
                    std::map<std::string, std::string>* metadata) {
  if (!v.is_object())
    throw detail::checkpoint_error(what, "header: __metadata__ is not an object but ",
                                   v.type_name());
  for (const auto& item : v.items()) {
    if (!item.value().is_string())
      throw detail::checkpoint_error(what, "header: __metadata__ value of ",
                                     detail::quoted(item.key()), " is not a string but ",
                                     item.value().type_name());
    if (metadata) (*metadata)[item.key()] = item.value().get<std::string>();
  }
}

void check_no_overlap(const std::vector<TensorInfo>& tensors, const std::string& what) {
  std::vector<size_t> order;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].nbytes() > 0) order.push_back(i);  // empty ranges overlap nothing
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors[a].begin < tensors[b].begin; });
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo& a = tensors[order[k - 1]];
    const TensorInfo& b = tensors[order[k]];
    if (b.begin < a.end)
      throw detail::checkpoint_error(what, "tensors ", detail::quoted(a.name), " [", a.begin, ", ",
                                     a.end, ") and ", detail::quoted(b.name), " [", b.begin, ", ",
                                     b.end, ") overlap");
  }
}

}  // namespace

const char* dtype_name(DType dtype) {
  return row(dtype).name;
}
int64_t dtype_bytes(DType dtype) {
  return row(dtype).bytes;
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (const DTypeRow& r : kDTypes)
    if (name == r.name) return r.dtype;
  return std::nullopt;
}

int64_t TensorInfo::numel() const {
  uint64_t n = 1;  // unsigned: no undefined behaviour on an unvalidated shape
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return static_cast<int64_t>(n);
}

namespace detail {

std::optional<int64_t> checked_nbytes(const std::vector<int64_t>& shape, DType dtype) {
  int64_t n = dtype_bytes(dtype);
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

}  // namespace detail

std::vector<TensorInfo> parse_safetensors_header(std::string_view header_json, int64_t data_bytes,
                                                 const std::string& what,
                                                 std::map<std::string, std::string>* metadata) {
  if (data_bytes < 0)
    throw detail::checkpoint_error(what, "negative data buffer size ", data_bytes);
  if (static_cast<int64_t>(header_json.size()) > kMaxHeaderBytes)
    throw detail::checkpoint_error(what, "header of ", header_json.size(),
                                   " bytes exceeds the limit of ", kMaxHeaderBytes);
  if (metadata) metadata->clear();
  KeyChecker checker;
  if (!Json::sax_parse(header_json.begin(), header_json.end(), &checker)) {
    throw detail::checkpoint_error(
        what, "header: ", checker.error().empty() ? "not valid JSON" : checker.error());
  }
  Json root;
  try {
    root = Json::parse(header_json.begin(), header_json.end());
  } catch (const nlohmann::json::exception& e) {
    throw detail::checkpoint_error(what, "header is not valid JSON: ", e.what());
  }
  if (!root.is_object())
    throw detail::checkpoint_error(what, "header is not a JSON object but ", root.type_name());

  std::vector<TensorInfo> tensors;
  for (const auto& item : root.items()) {
    if (item.key() == "__metadata__") {
      parse_metadata(item.value(), what, metadata);
    } else {
      tensors.push_back(parse_entry(item.key(), item.value(), data_bytes, what));
    }
  }
  check_no_overlap(tensors, what);
  return tensors;
}

}  // namespace zero::ckpt
