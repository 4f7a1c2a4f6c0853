// Diagnostics context, typed value conversions and the Section reader of config_detail.h:
// the lenient-but-never-silent rules for numbers, booleans, "auto" and unknown keys.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include "config_detail.h"

namespace zero::detail {

static std::string path_or_root(const std::string& path) {
  return path.empty() ? "(root)" : path;
}

int Ctx::line_of(const std::string& path) const {
  if (!lines_) return 0;
  std::string p = path;
  while (!p.empty()) {
    auto it = lines_->find(p);
    if (it != lines_->end()) return it->second;
    size_t cut = p.find_last_of(".[");
    if (cut == std::string::npos) break;
    p.resize(cut);
  }
  return 0;
}

bool Ctx::is_overridden(const std::string& path) const {
  for (const std::string& o : overridden) {
    if (path == o || (path.size() > o.size() && path.compare(0, o.size(), o) == 0 &&
                      (path[o.size()] == '.' || path[o.size()] == '['))) {
      return true;
    }
  }
  return false;
}

void Ctx::note_key(ConfigSchemaKey key) {
  if (!schema) return;
  for (ConfigSchemaKey& k : *schema) {
    if (k.path != key.path) continue;
    if (key.kind != ConfigSchemaKey::Kind::kAny) k = std::move(key);
    return;
  }
  schema->push_back(std::move(key));
}

static ConfigSchemaKey schema_key(std::string path, ConfigSchemaKey::Kind kind) {
  ConfigSchemaKey k;
  k.path = std::move(path);
  k.kind = kind;
  return k;
}

ConfigDiagnostic Ctx::make(const std::string& path, const std::string& message) const {
  ConfigDiagnostic d;
  d.path = path_or_root(path);
  d.message = message;
  if (is_overridden(path)) {
    d.file = "--set";
    d.line = 0;
  } else {
    d.file = source_;
    d.line = line_of(path);
  }
  return d;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string type_name(const nlohmann::json& v) {
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    if (s.size() > 40) s = s.substr(0, 40) + "...";
    return "the string \"" + s + "\"";
  }
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_null()) return "null";
  if (v.is_object()) return "an object";
  if (v.is_array()) return "an array";
  return "the number " + v.dump();
}

// Optimal-string-alignment distance, for "did you mean" suggestions.
static size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

std::string nearest(const std::string& key, const std::vector<std::string>& candidates) {
  if (key.size() > 64) return "";
  std::string lk = lower(key), best;
  size_t best_d = SIZE_MAX;
  for (const std::string& c : candidates) {
    size_t d = edit_distance(lk, lower(c));
    if (d < best_d) best_d = d, best = c;
  }
  size_t limit = std::max<size_t>(2, key.size() / 3);
  return best_d <= limit ? best : "";
}

static bool numeric_string(const nlohmann::json& v, double& out) {
  if (!v.is_string()) return false;
  const std::string& s = v.get_ref<const std::string&>();
  if (s.empty() || s.size() > 64) return false;
  try {
    size_t used = 0;
    double d = std::stod(s, &used);
    if (used != s.size() || !std::isfinite(d)) return false;
    out = d;
    return true;
  } catch (...) {
    return false;
  }
}

bool to_int64(Ctx& ctx, const std::string& path, const nlohmann::json& v, int64_t& out) {
  if (v.is_number_integer() && !v.is_number_unsigned()) {
    out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) {
      ctx.error(path, "value " + v.dump() + " is too large");
      return false;
    }
    out = static_cast<int64_t>(u);
    return true;
  }
  double d = 0;
  bool from_string = numeric_string(v, d);
  if (v.is_number_float()) d = v.get<double>();
  if (!v.is_number_float() && !from_string) {
    ctx.error(path, "expected an integer, got " + type_name(v));
    return false;
  }
  if (!std::isfinite(d) || d != std::floor(d)) {
    ctx.error(path, "expected an integer, got " + type_name(v) + " (not a whole number)");
    return false;
  }
  if (d >= 9.2233720368547758e18 || d < -9.2233720368547758e18) {
    ctx.error(path, "value " + type_name(v) + " is out of the 64-bit integer range");
    return false;
  }
  out = static_cast<int64_t>(d);
  return true;
}

bool to_double(Ctx& ctx, const std::string& path, const nlohmann::json& v, double& out) {
  if (v.is_number()) {
    out = v.get<double>();
    return true;
  }
  if (numeric_string(v, out)) return true;
  ctx.error(path, "expected a number, got " + type_name(v));
  return false;
}

bool to_bool(Ctx& ctx, const std::string& path, const nlohmann::json& v, bool& out) {
  if (v.is_boolean()) {
    out = v.get<bool>();
    return true;
  }
  if (v.is_string()) {
    std::string s = lower(v.get<std::string>());
    if (s == "true" || s == "false") {
      out = s == "true";
      return true;
    }
  }
  if (v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1)) {
    out = v.get<int64_t>() == 1;
    return true;
  }
  ctx.error(path, "expected true or false, got " + type_name(v));
  return false;
}

Section::Section(Ctx& c, const nlohmann::json* object, std::string path, Unknown unknown)
    : ctx(c), object_(object), path_(std::move(path)), unknown_(unknown) {
  if (object_ && object_->is_null()) object_ = nullptr;
  if (object_ && !object_->is_object()) {
    ctx.error(path_, "expected an object, got " + type_name(*object_));
    object_ = nullptr;
  }
}

std::string Section::child(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

const nlohmann::json* Section::get(const std::string& key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) {
    known_.push_back(key);
    ctx.note_key(schema_key(child(key), ConfigSchemaKey::Kind::kAny));
  }
  if (!object_) return nullptr;
  auto it = object_->find(key);
  if (it == object_->end() || it->is_null()) return nullptr;
  return &*it;
}

std::string Section::pick(std::initializer_list<const char*> names) {
  std::string found;
  for (const char* n : names) {
    if (!get(n)) continue;
    if (!found.empty()) {
      ctx.error(child(n), std::string("'") + n + "' and '" + found +
                              "' are the same setting (aliases); give only one");
      continue;
    }
    found = n;
  }
  return found;
}

bool Section::is_auto(const std::string& key) {
  const nlohmann::json* v = get(key);
  if (v && v->is_string() && v->get_ref<const std::string&>() == "auto") {
    ctx.autos.insert(child(key));
    return true;
  }
  return false;
}

bool Section::read(const std::string& key, bool& out) {
  const nlohmann::json* v = get(key);
  ctx.note_key(schema_key(child(key), ConfigSchemaKey::Kind::kBool));
  if (!v || is_auto(key)) return false;
  return to_bool(ctx, child(key), *v, out);
}

bool Section::read(const std::string& key, int64_t& out, int64_t min, int64_t max) {
  const nlohmann::json* v = get(key);
  ConfigSchemaKey k = schema_key(child(key), ConfigSchemaKey::Kind::kInt);
  k.int_min = min, k.int_max = max;
  ctx.note_key(std::move(k));
  if (!v || is_auto(key)) return false;
  int64_t x = 0;
  if (!to_int64(ctx, child(key), *v, x)) return false;
  if (x < min || x > max) {
    std::ostringstream m;
    m << "value " << x << " is out of range: ";
    if (max == INT64_MAX)
      m << "must be >= " << min;
    else
      m << "must be between " << min << " and " << max;
    if (min == 0 && x < 0) m << " (sizes and counts cannot be negative)";
    ctx.error(child(key), m.str());
    return false;
  }
  out = x;
  return true;
}

bool Section::read(const std::string& key, int& out, int64_t min, int64_t max) {
  int64_t x = out;
  if (!read(key, x, min, max)) return false;
  out = static_cast<int>(x);
  return true;
}

bool Section::read(const std::string& key, double& out, double min, double max) {
  const nlohmann::json* v = get(key);
  ConfigSchemaKey k = schema_key(child(key), ConfigSchemaKey::Kind::kFloat);
  k.float_min = min, k.float_max = max;
  ctx.note_key(std::move(k));
  if (!v || is_auto(key)) return false;
  double x = 0;
  if (!to_double(ctx, child(key), *v, x)) return false;
  if (!std::isfinite(x) || x < min || x > max) {
    std::ostringstream m;
    m << "value " << x << " is out of range: must be ";
    if (max == HUGE_VAL)
      m << ">= " << min;
    else
      m << "between " << min << " and " << max;
    ctx.error(child(key), m.str());
    return false;
  }
  out = x;
  return true;
}

bool Section::read(const std::string& key, std::string& out) {
  const nlohmann::json* v = get(key);
  ctx.note_key(schema_key(child(key), ConfigSchemaKey::Kind::kString));
  if (!v) return false;
  if (!v->is_string()) {
    ctx.error(child(key), "expected a string, got " + type_name(*v));
    return false;
  }
  out = v->get<std::string>();
  return true;
}

bool Section::read_enum(const std::string& key, std::string& out,
                        const std::vector<std::string>& values, bool ci) {
  const nlohmann::json* v = get(key);
  ConfigSchemaKey k = schema_key(child(key), ConfigSchemaKey::Kind::kEnum);
  k.values = values;
  ctx.note_key(std::move(k));
  if (!v || is_auto(key)) return false;
  std::string list;
  for (const std::string& s : values) list += (list.empty() ? "\"" : ", \"") + s + "\"";
  if (!v->is_string()) {
    ctx.error(child(key), "expected one of " + list + ", got " + type_name(*v));
    return false;
  }
  const std::string& s = v->get_ref<const std::string&>();
  for (const std::string& allowed : values) {
    if (s == allowed || (ci && lower(s) == lower(allowed))) {
      out = allowed;
      return true;
    }
  }
  std::string hint = nearest(s, values);
  ctx.error(child(key), "unknown value \"" + (s.size() > 40 ? s.substr(0, 40) + "..." : s) +
                            "\"; valid values: " + list +
                            (hint.empty() ? "" : "; did you mean \"" + hint + "\"?"));
  return false;
}

static void report_other_value(Section& s, const std::string& key, Otherwise otherwise,
                               const std::string& why) {
  if (otherwise == Otherwise::kRefuse)
    s.ctx.error(s.child(key), "not supported: " + why);
  else
    s.ctx.warn(s.child(key), "no effect: " + why);
}

void read_fixed(Section& s, const std::string& key, bool ours, Otherwise otherwise,
                const std::string& why) {
  bool v = ours;
  if (s.read(key, v) && v != ours) report_other_value(s, key, otherwise, why);
}

void read_fixed(Section& s, const std::string& key, int64_t ours, int64_t min, int64_t max,
                const std::string& why) {
  int64_t v = ours;
  if (s.read(key, v, min, max) && v != ours) report_other_value(s, key, Otherwise::kNoEffect, why);
}

void read_fixed(Section& s, const std::string& key, double ours, double min, double max,
                const std::string& why) {
  double v = ours;
  if (s.read(key, v, min, max) && v != ours) report_other_value(s, key, Otherwise::kNoEffect, why);
}

void Section::finish(const std::string& what) {
  if (!object_) return;
  for (auto it = object_->begin(); it != object_->end(); ++it) {
    const std::string& key = it.key();
    if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
    std::string shown = key.size() > 60 ? key.substr(0, 60) + "..." : key;
    if (!path_.empty() && is_top_level_key(key)) {
      ctx.error(child(key), "'" + shown + "' belongs at the top level of the config, not inside '" +
                                path_ + "'; as written it would be ignored");
      continue;
    }
    std::string hint = nearest(key, known_);
    std::string msg = "unknown key '" + shown + "' in " + what;
    if (!hint.empty()) msg += "; did you mean '" + hint + "'?";
    if (unknown_ == Unknown::kError) {
      ctx.error(child(key), msg);
    } else {
      ctx.warn(child(key), msg + " (ignored)");
    }
  }
}

}  // namespace zero::detail
