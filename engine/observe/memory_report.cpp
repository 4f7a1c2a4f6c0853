// The engine's memory report: what the stage, the optimizer (device, host, NVMe) and the
// activation checkpoints hold, read from the real tensors, and its one-line text form.
#include "engine_impl.h"

#include <zero/engine/engine.h>

#include <sstream>

namespace zero {

namespace {

std::string mb(int64_t bytes) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(2);
  out << static_cast<double>(bytes) / (1024.0 * 1024.0) << " MiB";
  return out.str();
}

}  // namespace

std::string MemoryReport::to_string() const {
  std::ostringstream out;
  out << "model states " << mb(model_states_bytes()) << " (params " << mb(parameters_bytes)
      << ", grads " << mb(gradients_bytes) << ", master " << mb(master_params_bytes)
      << ", optimizer " << mb(optimizer_states_bytes) << "), comm buffers "
      << mb(comm_buffers_bytes) << ", gathered " << mb(gathered_params_bytes) << " (peak "
      << mb(peak_gathered_params_bytes) << ")";
  if (kept_params_bytes > 0) out << ", kept for gathers " << mb(kept_params_bytes);
  if (!zeropp.empty()) out << ", ZeRO++: " << zeropp;
  if (mics_shard_size > 0)
    out << ", MiCS: shard groups of " << mics_shard_size << " ranks x " << mics_replicas
        << " replicas";
  if (secondary_gathers > 0 || secondary_params_bytes > 0)
    out << ", hpZ secondary " << mb(secondary_params_bytes) << " (" << secondary_gathers
        << " gathers within the group)";
  if (host_bytes() > 0)
    out << "; host: params " << mb(host_parameters_bytes) << ", master "
        << mb(host_master_params_bytes) << ", optimizer " << mb(host_optimizer_states_bytes)
        << ", grads " << mb(host_gradients_bytes) << ", buffers " << mb(host_buffers_bytes);
  if (nvme_bytes > 0) out << "; nvme " << mb(nvme_bytes);
  if (peak_activation_checkpoint_bytes + peak_host_activation_checkpoint_bytes > 0)
    out << "; activation checkpoints " << mb(activation_checkpoint_bytes) << " (peak "
        << mb(peak_activation_checkpoint_bytes) << "), on the host "
        << mb(host_activation_checkpoint_bytes) << " (peak "
        << mb(peak_host_activation_checkpoint_bytes) << ")";
  return out.str();
}

MemoryReport Engine::memory_report() const {
  return impl_->memory_report();
}

MemoryReport Engine::Impl::memory_report() const {
  const StageMemory m = stage->memory();
  MemoryReport r;
  r.parameters_bytes = m.parameters_bytes;
  r.gradients_bytes = m.gradients_bytes;
  r.master_params_bytes = m.master_params_bytes;
  r.optimizer_states_bytes = optimizer->state_bytes();
  const OffloadMemory host = optimizer->offload_memory();
  r.host_master_params_bytes = host.host_master_bytes;
  r.host_optimizer_states_bytes = host.host_states_bytes;
  r.host_gradients_bytes = host.host_grads_bytes;
  r.host_buffers_bytes = host.host_buffers_bytes + m.offloaded_params.host_buffers_bytes;
  r.nvme_bytes = host.nvme_bytes + m.offloaded_params.nvme_bytes;
  r.host_parameters_bytes = m.offloaded_params.host_params_bytes;
  r.comm_buffers_bytes = m.comm_buffers_bytes;
  r.gathered_params_bytes = m.gathered_params_bytes;
  r.peak_gathered_params_bytes = m.peak_gathered_params_bytes;
  r.kept_params_bytes = m.kept_params_bytes;
  r.unit_gathers = m.unit_gathers;
  r.secondary_gathers = m.secondary_gathers;
  r.secondary_params_bytes = m.secondary_params_bytes;
  r.zeropp = zeropp;
  if (replicas) {
    r.mics_shard_size = stage->layout().world_size();
    r.mics_replicas = replicas->world_size();
  }
  const ActivationCheckpointStats a = activations->stats();
  r.activation_checkpoint_bytes = a.live_bytes;
  r.peak_activation_checkpoint_bytes = a.peak_live_bytes;
  r.host_activation_checkpoint_bytes = a.host_live_bytes;
  r.peak_host_activation_checkpoint_bytes = a.peak_host_live_bytes;
  return r;
}

}  // namespace zero
