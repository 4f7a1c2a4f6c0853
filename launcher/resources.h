// The job's resources as a plain value: hosts and their slots (GPU ids), parsed from a
// DeepSpeed hostfile, filtered by --include/--exclude/--num_nodes/--num_gpus. No side effects.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "options.h"

namespace zero::launcher {

struct HostEntry {  // one `NAME slots=N` line of a hostfile
  std::string host;
  int slots = 0;
};

struct NodeSlots {  // one node of the job and the slot ids (local GPU ids) it runs ranks on
  std::string host;
  std::vector<int> slots;
  bool operator==(const NodeSlots& o) const { return host == o.host && slots == o.slots; }
};
using Resources = std::vector<NodeSlots>;  // in hostfile order: node i has node_rank i

// DeepSpeed's hostfile syntax: `NAME slots=N` per line, `#` comment lines, blank lines.
// Throws UsageError naming `origin` on duplicates, malformed lines or an empty file.
std::vector<HostEntry> parse_hostfile(const std::string& text, const std::string& origin);
// nullopt when the file does not exist (DeepSpeed then runs on local resources only).
std::optional<std::vector<HostEntry>> read_hostfile(const std::string& path);

Resources expand_slots(const std::vector<HostEntry>& hosts);  // host -> slots 0..N-1
// --include and --exclude together: UsageError (checked when the options are parsed, and again
// by filter_resources for callers that build the strings themselves).
void check_include_exclude(const std::string& include, const std::string& exclude);
// DeepSpeed's parse_resource_filter: NODE_SPEC[@NODE_SPEC...], NODE_SPEC = NAME[:SLOT[,SLOT...]].
Resources filter_resources(const Resources& pool, const std::string& include,
                           const std::string& exclude);

// Node 0 hands its choice to the other nodes as `host:0,1@host2:0,1` (--world_info).
std::string encode_world_info(const Resources& resources);
Resources decode_world_info(const std::string& text);

int total_slots(const Resources& resources);
int rank_offset(const Resources& resources, int node_rank);  // slots of nodes before node_rank

// What this machine offers when there is no hostfile.
struct LocalDevices {
  int gpu_count = 0;                 // entries of /proc/driver/nvidia/gpus
  std::string cuda_visible_devices;  // the launcher's own CUDA_VISIBLE_DEVICES, if set
};

// runner.py's main(): hostfile (or local devices), include/exclude, --num_nodes, --num_gpus.
// `notes` receives messages for the user (e.g. CUDA_VISIBLE_DEVICES being used or ignored).
Resources select_resources(const Options& options,
                           const std::optional<std::vector<HostEntry>>& hostfile,
                           const LocalDevices& local, std::vector<std::string>* notes);

}  // namespace zero::launcher
