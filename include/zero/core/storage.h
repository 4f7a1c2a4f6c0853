// Storage release / re-allocation of a tensor's whole storage (stage 3, zero::Init). The tensor
// and every view of it (parameters, autograd's saved views) keep their identity and shape and
// see the new memory.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include <cstdint>

namespace zero::detail {

void free_storage(const at::Tensor& tensor);
void allocate_storage(const at::Tensor& tensor, int64_t nbytes);
// free_storage that hands the memory to the caller instead of freeing it; and its inverse, which
// gives the tensor `data` (of `nbytes`, made by the storage's allocator) back as its storage.
at::DataPtr take_storage(const at::Tensor& tensor);
void put_storage(const at::Tensor& tensor, at::DataPtr data, int64_t nbytes);
bool storage_allocated(const at::Tensor& tensor);

}  // namespace zero::detail
