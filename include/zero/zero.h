// The public header of the ZeRO engine for LibTorch: #include <zero/zero.h>, link zero::zero.
// Each line brings in one area's public API.
#pragma once

#include <zero/error.h>
#include <zero/config/config.h>
#include <zero/comm/communicator.h>
#include <zero/comm/parallel_grid.h>
#include <zero/comm/process_group.h>
#include <zero/kernels/adam.h>
#include <zero/kernels/cpu.h>
#include <zero/kernels/math.h>
#include <zero/core/layout.h>
#include <zero/core/stage.h>
#include <zero/engine/activation/activation_checkpointing.h>
#include <zero/engine/allocations.h>
#include <zero/engine/args.h>
#include <zero/engine/clean_names.h>
#include <zero/engine/activation/checkpointed.h>
#include <zero/engine/horovod/distributed_optimizer.h>
#include <zero/engine/host_pool.h>
#include <zero/engine/engine.h>
#include <zero/engine/init.h>
#include <zero/engine/pipe/module.h>
#include <zero/engine/load_state_dict.h>
#include <zero/engine/lr_schedule.h>
#include <zero/engine/memory_estimate.h>
#include <zero/engine/sharded.h>
#include <zero/tp/layers.h>
#include <zero/tp/mappings.h>
