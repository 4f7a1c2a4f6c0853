// The dp x tp x pp grid of a job (DeepSpeed's `mpu`): GridLayout is the rank arithmetic as a
// plain value (Megatron's default order: tensor fastest, then data, then pipeline), tested
// without processes; ParallelGrid adds this rank's sub-communicators, made once with new_group.
#pragma once

#include <zero/comm/communicator.h>

#include <memory>
#include <string>
#include <vector>

namespace zero {

struct GridSizes {
  int tensor = 1;
  int pipeline = 1;
};

// A rank's place in the grid.
struct GridCoord {
  int tensor = 0;
  int data = 0;
  int pipeline = 0;
};

class GridLayout {
 public:
  // Throws ConfigError when a size is < 1 or tensor x pipeline does not divide world_size.
  GridLayout(int world_size, GridSizes sizes);

  int world_size() const { return world_; }
  int tensor_size() const { return tensor_; }
  int data_size() const { return data_; }
  int pipeline_size() const { return pipeline_; }

  int rank_of(GridCoord c) const { return c.tensor + tensor_ * (c.data + data_ * c.pipeline); }
  GridCoord coord_of(int rank) const;

  // Every group of one kind, each as world ranks in group-rank order, in a fixed order that
  // every rank walks the same way (so the new_group calls line up).
  std::vector<std::vector<int>> tensor_groups() const;
  std::vector<std::vector<int>> data_groups() const;
  std::vector<std::vector<int>> pipeline_groups() const;
  // The model-parallel group of a data rank: the tensor x pipeline ranks that together hold one
  // replica of the model (where gradient norms and overflow flags are summed).
  std::vector<std::vector<int>> model_groups() const;

  // "tp 2 x dp 2 x pp 1 (world 4)".
  std::string to_string() const;

 private:
  int world_ = 1, tensor_ = 1, data_ = 1, pipeline_ = 1;
};

class ParallelGrid {
 public:
  ParallelGrid() = default;

  const GridLayout& layout() const { return layout_; }
  GridCoord coord() const { return coord_; }

  int tensor_rank() const { return coord_.tensor; }
  int tensor_size() const { return layout_.tensor_size(); }
  const std::shared_ptr<Communicator>& tensor_group() const { return tensor_; }
  int data_rank() const { return coord_.data; }
  int data_size() const { return layout_.data_size(); }
  const std::shared_ptr<Communicator>& data_group() const { return data_; }
  int pipeline_rank() const { return coord_.pipeline; }
  int pipeline_size() const { return layout_.pipeline_size(); }
  const std::shared_ptr<Communicator>& pipeline_group() const { return pipeline_; }
  const std::shared_ptr<Communicator>& model_group() const { return model_; }
  const std::shared_ptr<Communicator>& world() const { return world_; }

  std::string to_string() const { return layout_.to_string(); }

 private:
  friend ParallelGrid parallel_grid(std::shared_ptr<Communicator> world, GridSizes sizes);
  ParallelGrid(GridLayout layout) : layout_(layout) {}

  GridLayout layout_{1, {}};
  GridCoord coord_;
  std::shared_ptr<Communicator> world_, tensor_, data_, pipeline_, model_;
};

// Collective over `world`: every rank calls it with the same sizes. A group that spans the
// whole world is `world` itself; the others are made with new_group in GridLayout's order.
ParallelGrid parallel_grid(std::shared_ptr<Communicator> world, GridSizes sizes);

}  // namespace zero
