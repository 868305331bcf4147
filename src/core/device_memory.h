// Device memory as core sees it: the operations behind Buffer, copy() and synchronize(), declared
// here so that core includes no CUDA header. src/cuda (memory.cu, device_info.cu) implements them
// when attnkit is built with CUDA; device_memory_none.cc otherwise, where allocating, copying and
// synchronising throw attnkit::Error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace attnkit::cuda {

void* device_malloc(size_t nbytes);
void device_free(void* ptr) noexcept;
void copy_host_to_device(void* dst, const void* src, size_t nbytes);
void copy_device_to_host(void* dst, const void* src, size_t nbytes);
void copy_device_to_device(void* dst, const void* src, size_t nbytes);
// Queued on `stream` (a cudaStream_t; null: the calling thread's default stream, where the backends
// queue their kernels); returns without waiting for it.
void copy_device_to_device_async(void* dst, const void* src, size_t nbytes, void* stream);
// Whether `stream` (as above) is being captured into a CUDA graph: what is queued there then runs
// only when the graph is launched, and nothing may be allocated.
bool stream_is_capturing(void* stream);
void device_memset(void* dst, uint8_t value, size_t nbytes);
void device_synchronize();
// Empty when a CUDA device can be used; else why not.
std::string why_unavailable();
// The name of the device in use ("NVIDIA H200"); call only where why_unavailable() is empty.
std::string current_device_name();

}  // namespace attnkit::cuda
