// GridLayout's rank arithmetic and the collective construction of a ParallelGrid.
#include <zero/comm/parallel_grid.h>

#include <zero/error.h>

#include <sstream>

namespace zero {

GridLayout::GridLayout(int world_size, GridSizes sizes)
    : world_(world_size), tensor_(sizes.tensor), pipeline_(sizes.pipeline) {
  ZERO_CHECK(world_size >= 1, ConfigError, "parallel grid: world size ", world_size, " < 1");
  ZERO_CHECK(sizes.tensor >= 1, ConfigError, "parallel grid: tensor-parallel size ", sizes.tensor,
             " < 1");
  ZERO_CHECK(sizes.pipeline >= 1, ConfigError, "parallel grid: pipeline size ", sizes.pipeline,
             " < 1");
  ZERO_CHECK(world_size % (sizes.tensor * sizes.pipeline) == 0, ConfigError,
             "parallel grid: tensor-parallel size ", sizes.tensor, " x pipeline stages ",
             sizes.pipeline, " = ", sizes.tensor * sizes.pipeline, " does not divide the world of ",
             world_size, " ranks (data-parallel size = world / (tp x pp))");
  data_ = world_size / (sizes.tensor * sizes.pipeline);
}

GridCoord GridLayout::coord_of(int rank) const {
  ZERO_CHECK(rank >= 0 && rank < world_, UsageError, "parallel grid: rank ", rank,
             " outside the world of ", world_);
  GridCoord c;
  c.tensor = rank % tensor_;
  c.data = (rank / tensor_) % data_;
  c.pipeline = rank / (tensor_ * data_);
  return c;
}

std::vector<std::vector<int>> GridLayout::tensor_groups() const {
  std::vector<std::vector<int>> groups;
  for (int p = 0; p < pipeline_; ++p)
    for (int d = 0; d < data_; ++d) {
      std::vector<int>& g = groups.emplace_back();
      for (int t = 0; t < tensor_; ++t) g.push_back(rank_of({t, d, p}));
    }
  return groups;
}

std::vector<std::vector<int>> GridLayout::data_groups() const {
  std::vector<std::vector<int>> groups;
  for (int p = 0; p < pipeline_; ++p)
    for (int t = 0; t < tensor_; ++t) {
      std::vector<int>& g = groups.emplace_back();
      for (int d = 0; d < data_; ++d) g.push_back(rank_of({t, d, p}));
    }
  return groups;
}

std::vector<std::vector<int>> GridLayout::pipeline_groups() const {
  std::vector<std::vector<int>> groups;
  for (int d = 0; d < data_; ++d)
    for (int t = 0; t < tensor_; ++t) {
      std::vector<int>& g = groups.emplace_back();
      for (int p = 0; p < pipeline_; ++p) g.push_back(rank_of({t, d, p}));
    }
  return groups;
}

std::vector<std::vector<int>> GridLayout::model_groups() const {
  std::vector<std::vector<int>> groups;
  for (int d = 0; d < data_; ++d) {
    std::vector<int>& g = groups.emplace_back();
    for (int p = 0; p < pipeline_; ++p)
      for (int t = 0; t < tensor_; ++t) g.push_back(rank_of({t, d, p}));
  }
  return groups;
}

std::string GridLayout::to_string() const {
  std::ostringstream out;
  out << "tp " << tensor_ << " x dp " << data_ << " x pp " << pipeline_ << " (world " << world_
      << ")";
  return out.str();
}

namespace {

// This rank's group among `groups`: the world itself when one group spans it, else the one
// new_group call (of all, made by every rank in the same order) that includes this rank.
std::shared_ptr<Communicator> make_groups(const std::shared_ptr<Communicator>& world,
                                          const std::vector<std::vector<int>>& groups) {
  if (groups.size() == 1) return world;
  std::shared_ptr<Communicator> mine;
  for (const auto& ranks : groups)
    if (auto g = world->new_group(ranks)) mine = g;
  ZERO_ASSERT(mine, "rank ", world->rank(), " is in none of the grid's groups");
  return mine;
}

}  // namespace

ParallelGrid parallel_grid(std::shared_ptr<Communicator> world, GridSizes sizes) {
  ZERO_CHECK(world, UsageError, "parallel_grid: no world communicator");
  ParallelGrid grid(GridLayout(world->world_size(), sizes));
  grid.coord_ = grid.layout_.coord_of(world->rank());
  grid.world_ = world;
  grid.tensor_ = make_groups(world, grid.layout_.tensor_groups());
  grid.data_ = make_groups(world, grid.layout_.data_groups());
  grid.pipeline_ = make_groups(world, grid.layout_.pipeline_groups());
  grid.model_ = make_groups(world, grid.layout_.model_groups());
  return grid;
}

}  // namespace zero
