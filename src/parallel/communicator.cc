// InProcessGroup: every rank of a context-parallel group in one process, one after another, its
// buffers on the host or on one GPU.
#include "attnkit/communicator.h"

#include <algorithm>
#include <cstring>

#include "attnkit/error.h"
#include "attnkit/tensor.h"
#include "core/device_memory.h"

namespace attnkit {

// One collective in progress: what the ranks that have called so far gave, and where each wants
// the result.
struct InProcessGroup::Round {
  Device device = Device::cpu;
  size_t bytes = 0;
  int num_called = 0;
  void* stream = nullptr;         // cuda: the stream of the round's first call
  std::vector<uint8_t> gathered;  // cpu: [size * bytes]
  Buffer gathered_dev;            // cuda: at least size * bytes, kept from round to round
  std::vector<void*> recv;        // [size], null until that rank calls

  // Where the ranks' sends are gathered: [size * bytes] on the round's device.
  uint8_t* gathered_data() {
    return static_cast<uint8_t*>(device == Device::cpu ? gathered.data() : gathered_dev.data());
  }
  // dst <- src, both on the round's device; cuda: queued on the round's stream.
  void copy_bytes(void* dst, const void* src, size_t n) const {
    if (device == Device::cpu) {
      std::memcpy(dst, src, n);
    } else {
      cuda::copy_device_to_device_async(dst, src, n, stream);
    }
  }
};

class InProcessGroup::Rank : public Communicator {
 public:
  Rank(Round& round, int rank, int size) : round_(round), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return round_.device; }

  void all_gather_bytes(const void* send, void* recv, size_t bytes, void* stream) override {
    Round& r = round_;
    ATTNKIT_CHECK(r.recv[static_cast<size_t>(rank_)] == nullptr, "in-process all_gather: rank ", rank_,
                  " called twice before every rank of ", size_, " called once (", r.num_called, " have)");
    ATTNKIT_CHECK(r.num_called == 0 || bytes == r.bytes, "in-process all_gather: rank ", rank_, " gives ", bytes,
                  " bytes, expected the ", r.bytes, " the other ranks gave");
    ATTNKIT_CHECK(bytes == 0 || (send != nullptr && recv != nullptr), "in-process all_gather: rank ", rank_,
                  ": send and recv must not be null");
    // The copies of one round are ordered by one stream; a second would race them.
    ATTNKIT_CHECK(r.device == Device::cpu || r.num_called == 0 || stream == r.stream, "in-process all_gather: rank ",
                  rank_, " passes another stream than the ", r.num_called,
                  " rank(s) before it in this round, expected the same one (a round's copies are ordered by one)");
    const size_t total = bytes * static_cast<size_t>(size_);
    if (r.num_called == 0) {
      r.bytes = bytes;
      r.stream = stream;
      if (r.device == Device::cpu) {
        r.gathered.resize(total);
      } else if (r.gathered_dev.nbytes() < total) {
        // A graph would keep the new buffer's address without allocating it (the runtime refuses
        // an allocation during capture anyway): the round's size must have run once before.
        ATTNKIT_CHECK(!cuda::stream_is_capturing(stream), "in-process all_gather: rank ", rank_, " starts a round of ",
                      bytes, " bytes a rank, whose gather buffer (", total, " bytes, ", r.gathered_dev.nbytes(),
                      " allocated) cannot be allocated while the stream is captured into a CUDA graph: run one round "
                      "of this size before capturing");
        r.gathered_dev = Buffer(r.device, total);
      }
    }
    if (bytes > 0) r.copy_bytes(r.gathered_data() + bytes * static_cast<size_t>(rank_), send, bytes);
    // A rank that gives no bytes still counts as called: a placeholder address marks it.
    r.recv[static_cast<size_t>(rank_)] = bytes > 0 ? recv : &r;
    if (++r.num_called < size_) return;
    for (void* dst : r.recv) {
      if (bytes > 0) r.copy_bytes(dst, r.gathered_data(), total);
    }
    r.num_called = 0;
    std::fill(r.recv.begin(), r.recv.end(), nullptr);
  }

 private:
  Round& round_;
  int rank_;
  int size_;
};

InProcessGroup::InProcessGroup(int size, Device device) : round_(std::make_unique<Round>()) {
  ATTNKIT_CHECK(size >= 1, "in-process group: size (the number of ranks) must be >= 1, got ", size);
  round_->device = device;
  round_->recv.assign(static_cast<size_t>(size), nullptr);
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<Rank>(*round_, r, size));
}

InProcessGroup::~InProcessGroup() = default;

Device InProcessGroup::device() const { return round_->device; }

Communicator& InProcessGroup::rank(int r) {
  ATTNKIT_CHECK(r >= 0 && r < size(), "in-process group: rank must be in 0..", size() - 1, ", got ", r);
  return *ranks_[static_cast<size_t>(r)];
}

}  // namespace attnkit
