#include <zero/engine/activation/checkpointed.h>
#include <zero/engine/clean_names.h>
#include <zero/engine/sharded.h>
#include <zero/error.h>

#include <unordered_map>

namespace zero {

namespace {
constexpr const char* kWrappedChild = "inner";  // the name both wrappers register
}  // namespace

CleanNames::CleanNames(const torch::nn::Module& model) {
  for (const auto& item : model.named_modules(/*name_prefix=*/"", /*include_self=*/true)) {
    const torch::nn::Module* m = item.value().get();
    if (dynamic_cast<const ShardedImpl*>(m) || dynamic_cast<const CheckpointedImpl*>(m))
      wrappers_.insert(item.key());
  }
}

std::string CleanNames::operator()(const std::string& registered) const {
  if (wrappers_.empty()) return registered;
  std::string path, clean;  // the registered path walked so far, and its clean form
  size_t begin = 0;
  while (true) {
    const size_t dot = registered.find('.', begin);
    const std::string segment =
        registered.substr(begin, dot == std::string::npos ? dot : dot - begin);
    const bool wrapped = segment == kWrappedChild && wrappers_.count(path);
    if (!wrapped) clean += (clean.empty() ? "" : ".") + segment;
    path += (path.empty() ? "" : ".") + segment;
    if (dot == std::string::npos) break;
    begin = dot + 1;
  }
  return clean;
}

std::vector<std::string> CleanNames::all(const std::vector<std::string>& registered) const {
  std::vector<std::string> out;
  std::unordered_map<std::string, const std::string*> owner;
  for (const std::string& name : registered) {
    out.push_back((*this)(name));
    auto [it, fresh] = owner.emplace(out.back(), &name);
    ZERO_CHECK(fresh, UsageError, "clean names: '", name, "' and '", *it->second, "' both become '",
               out.back(), "' without the wrappers' segments; rename one");
  }
  return out;
}

}  // namespace zero
