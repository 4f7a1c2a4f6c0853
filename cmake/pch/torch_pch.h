// The precompiled header of every target that links LibTorch (cmake/ZeroBuildSpeed.cmake).
// Nothing of ours: only what is parsed the same way in every translation unit.
#pragma once
#include <torch/torch.h>
