// Hostfile parsing and resource filtering with DeepSpeed's semantics (runner.py:
// _parse_hostfile, parse_resource_filter, main), as pure functions tested on their own.
#include "resources.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include <zero/error.h>
#include <zero/text.h>

namespace zero::launcher {
namespace {

using ::zero::detail::trim;

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  if (s.empty()) return {""};
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) parts.push_back(cur);
  if (!s.empty() && s.back() == sep) parts.emplace_back();
  return parts;
}

int parse_slot(const std::string& text, const std::string& spec) {
  std::string t = trim(text);
  ZERO_CHECK(!t.empty() && std::all_of(t.begin(), t.end(), ::isdigit) && t.size() < 9, UsageError,
             "zerorun: bad slot '", text, "' in '", spec, "' (slots are integers: host:0,2)");
  return std::stoi(t);
}

const NodeSlots* find_host(const Resources& r, const std::string& host) {
  for (const NodeSlots& n : r)
    if (n.host == host) return &n;
  return nullptr;
}

}  // namespace

std::vector<HostEntry> parse_hostfile(const std::string& text, const std::string& origin) {
  std::vector<HostEntry> hosts;
  std::istringstream in(text);
  std::string raw;
  for (int line_no = 1; std::getline(in, raw); ++line_no) {
    std::string line = trim(raw);
    if (line.empty() || line[0] == '#') continue;
    // ^(\S+)\s+slots=(\d+): anything after the digits (a comment) is ignored, as in DeepSpeed.
    size_t name_end = line.find_first_of(" \t");
    size_t rest =
        name_end == std::string::npos ? name_end : line.find_first_not_of(" \t", name_end);
    bool ok = rest != std::string::npos && line.compare(rest, 6, "slots=") == 0 &&
              rest + 6 < line.size() && std::isdigit(static_cast<unsigned char>(line[rest + 6]));
    ZERO_CHECK(ok, UsageError, "zerorun: ", origin, ":", line_no, ": bad hostfile entry '", line,
               "' (expected `NAME slots=N`)");
    HostEntry e;
    e.host = line.substr(0, name_end);
    size_t digits_end = line.find_first_not_of("0123456789", rest + 6);
    std::string digits = line.substr(
        rest + 6, digits_end == std::string::npos ? std::string::npos : digits_end - rest - 6);
    ZERO_CHECK(digits.size() < 9, UsageError, "zerorun: ", origin, ":", line_no,
               ": slot count too large");
    e.slots = std::stoi(digits);
    for (const HostEntry& h : hosts)
      ZERO_CHECK(h.host != e.host, UsageError, "zerorun: ", origin, ":", line_no,
                 ": hostfile contains multiple entries for ", e.host);
    hosts.push_back(e);
  }
  ZERO_CHECK(!hosts.empty(), UsageError, "zerorun: hostfile ", origin,
             " is empty or not formatted correctly (expected `NAME slots=N` lines)");
  return hosts;
}

std::optional<std::vector<HostEntry>> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return parse_hostfile(text.str(), path);
}

Resources expand_slots(const std::vector<HostEntry>& hosts) {
  Resources r;
  for (const HostEntry& h : hosts) {
    NodeSlots n{h.host, {}};
    for (int s = 0; s < h.slots; ++s) n.slots.push_back(s);
    r.push_back(n);
  }
  return r;
}

void check_include_exclude(const std::string& include, const std::string& exclude) {
  ZERO_CHECK(include.empty() || exclude.empty(), UsageError,
             "zerorun: --include and --exclude are mutually exclusive");
}

Resources filter_resources(const Resources& pool, const std::string& include,
                           const std::string& exclude) {
  check_include_exclude(include, exclude);
  if (include.empty() && exclude.empty()) return pool;
  const bool including = !include.empty();
  Resources chosen = including ? Resources{} : pool;
  for (const std::string& spec : split(including ? include : exclude, '@')) {
    std::vector<std::string> parts = split(spec, ':');
    ZERO_CHECK(parts.size() <= 2 && !trim(parts[0]).empty(), UsageError, "zerorun: bad node spec '",
               spec, "' (expected NAME or NAME:SLOT[,SLOT...])");
    const std::string host = parts[0];
    const NodeSlots* known = find_host(pool, host);
    ZERO_CHECK(known, UsageError, "zerorun: hostname '", host, "' not found in hostfile");
    std::vector<int> slots;
    if (parts.size() == 2) {
      for (const std::string& s : split(parts[1], ',')) {
        int slot = parse_slot(s, spec);
        ZERO_CHECK(std::count(known->slots.begin(), known->slots.end(), slot), UsageError,
                   "zerorun: no slot '", slot, "' specified on host '", host, "'");
        slots.push_back(slot);
      }
    } else {
      slots = including ? known->slots : std::vector<int>{};
    }
    auto it = std::find_if(chosen.begin(), chosen.end(), [&](auto& n) { return n.host == host; });
    if (including) {
      if (it == chosen.end())
        chosen.push_back({host, slots});
      else
        it->slots = slots;  // a later spec of the same host replaces it, as in DeepSpeed
    } else if (parts.size() == 1) {
      it->slots.clear();
    } else {
      for (int s : slots)
        it->slots.erase(std::remove(it->slots.begin(), it->slots.end(), s), it->slots.end());
    }
  }
  // Keep the hostfile's order (it decides node ranks), drop duplicates and empty hosts.
  Resources out;
  for (const NodeSlots& p : pool) {
    const NodeSlots* c = find_host(chosen, p.host);
    if (!c) continue;
    NodeSlots n{p.host, {}};
    for (int s : c->slots)
      if (!std::count(n.slots.begin(), n.slots.end(), s)) n.slots.push_back(s);
    if (!n.slots.empty()) out.push_back(n);
  }
  return out;
}

std::string encode_world_info(const Resources& resources) {
  std::string out;
  for (const NodeSlots& n : resources) {
    out += (out.empty() ? "" : "@") + n.host + ":";
    for (size_t i = 0; i < n.slots.size(); ++i) out += (i ? "," : "") + std::to_string(n.slots[i]);
  }
  return out;
}

Resources decode_world_info(const std::string& text) {
  Resources r;
  for (const std::string& spec : split(text, '@')) {
    std::vector<std::string> parts = split(spec, ':');
    ZERO_CHECK(parts.size() == 2 && !parts[0].empty() && !parts[1].empty(), UsageError,
               "zerorun: bad --world_info '", text, "'");
    NodeSlots n{parts[0], {}};
    for (const std::string& s : split(parts[1], ',')) n.slots.push_back(parse_slot(s, spec));
    r.push_back(n);
  }
  ZERO_CHECK(!r.empty(), UsageError, "zerorun: empty --world_info");
  return r;
}

int total_slots(const Resources& resources) {
  int total = 0;
  for (const NodeSlots& n : resources) total += static_cast<int>(n.slots.size());
  return total;
}

int rank_offset(const Resources& resources, int node_rank) {
  ZERO_CHECK(node_rank >= 0 && node_rank < static_cast<int>(resources.size()), UsageError,
             "zerorun: --node_rank ", node_rank, " is out of range: the job has ", resources.size(),
             " node(s)");
  int offset = 0;
  for (int i = 0; i < node_rank; ++i) offset += static_cast<int>(resources[i].slots.size());
  return offset;
}

Resources select_resources(const Options& o, const std::optional<std::vector<HostEntry>>& hostfile,
                           const LocalDevices& local, std::vector<std::string>* notes) {
  if (!o.world_info.empty()) return decode_world_info(o.world_info);
  std::string include = o.include;
  const std::string& cvd = local.cuda_visible_devices;
  int local_slots = local.gpu_count > 0 ? local.gpu_count : 1;
  if (!hostfile && !cvd.empty()) {
    // As DeepSpeed: on one node without filters, CUDA_VISIBLE_DEVICES picks the slots.
    if (!o.include.empty() || !o.exclude.empty() || o.num_nodes > 1 || o.num_gpus > 0) {
      if (notes)
        notes->push_back("detected CUDA_VISIBLE_DEVICES=" + cvd +
                         " but ignoring it because --include/--exclude/--num_gpus/--num_nodes "
                         "was given");
    } else {
      include = "localhost:" + cvd;
      int max_id = -1;
      for (const std::string& s : split(cvd, ',')) max_id = std::max(max_id, parse_slot(s, cvd));
      local_slots = std::max(local_slots, max_id + 1);
      if (notes)
        notes->push_back("detected CUDA_VISIBLE_DEVICES=" + cvd + ": using --include=" + include);
    }
  }
  ZERO_CHECK((o.num_nodes < 0 && o.num_gpus < 0) || (o.include.empty() && o.exclude.empty()),
             UsageError, "zerorun: cannot combine --num_nodes/--num_gpus with --include/--exclude");
  std::vector<HostEntry> pool;
  if (hostfile) {
    pool = *hostfile;
  } else if (o.node_rank >= 0 && o.num_nodes > 1) {
    // torchrun style (one zerorun per node, no hostfile): num_nodes alike nodes.
    for (int i = 0; i < o.num_nodes; ++i) pool.push_back({"node" + std::to_string(i), local_slots});
  } else {
    ZERO_CHECK(o.num_nodes <= 1, UsageError, "zerorun: --num_nodes ", o.num_nodes,
               " but no hostfile lists other nodes (", o.hostfile,
               " does not exist); pass --hostfile, or --node_rank to start each node yourself");
    pool.push_back({"localhost", local_slots});
  }
  Resources active = filter_resources(expand_slots(pool), include, o.exclude);
  if (o.num_nodes > 0) {
    ZERO_CHECK(o.num_nodes <= static_cast<int>(active.size()), UsageError, "zerorun: --num_nodes ",
               o.num_nodes, " but only ", active.size(), " host(s) are available");
    active.resize(static_cast<size_t>(o.num_nodes));
  }
  if (o.num_gpus > 0) {
    for (NodeSlots& n : active) {
      n.slots.clear();
      for (int s = 0; s < o.num_gpus; ++s) n.slots.push_back(s);
    }
  }
  ZERO_CHECK(!active.empty(), UsageError, "zerorun: no resources left after --include/--exclude");
  return active;
}

}  // namespace zero::launcher
