// InProcessGroup: every rank of a context-parallel group in one process, one after another.
#include "attnkit/communicator.h"

#include <algorithm>
#include <cstring>

#include "attnkit/error.h"

namespace attnkit {

// One collective in progress: what the ranks that have called so far gave, and where each wants
// the result.
struct InProcessGroup::Round {
  size_t bytes = 0;
  int num_called = 0;
  std::vector<uint8_t> gathered;  // [size * bytes]
  std::vector<void*> recv;        // [size], null until that rank calls
};

class InProcessGroup::Rank : public Communicator {
 public:
  Rank(Round& round, int rank, int size) : round_(round), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::cpu; }

  void all_gather_bytes(const void* send, void* recv, size_t bytes, void*) override {
    Round& r = round_;
    ATTNKIT_CHECK(r.recv[static_cast<size_t>(rank_)] == nullptr, "in-process all_gather: rank ", rank_,
                  " called twice before every rank of ", size_, " called once (", r.num_called, " have)");
    ATTNKIT_CHECK(r.num_called == 0 || bytes == r.bytes, "in-process all_gather: rank ", rank_, " gives ", bytes,
                  " bytes, expected the ", r.bytes, " the other ranks gave");
    ATTNKIT_CHECK(bytes == 0 || (send != nullptr && recv != nullptr), "in-process all_gather: rank ", rank_,
                  ": send and recv must not be null");
    if (r.num_called == 0) {
      r.bytes = bytes;
      r.gathered.resize(bytes * static_cast<size_t>(size_));
    }
    if (bytes > 0) std::memcpy(r.gathered.data() + bytes * static_cast<size_t>(rank_), send, bytes);
    // A rank that gives no bytes still counts as called: a placeholder address marks it.
    r.recv[static_cast<size_t>(rank_)] = bytes > 0 ? recv : &r;
    if (++r.num_called < size_) return;
    for (void* dst : r.recv) {
      if (bytes > 0) std::memcpy(dst, r.gathered.data(), r.gathered.size());
    }
    r.num_called = 0;
    std::fill(r.recv.begin(), r.recv.end(), nullptr);
  }

 private:
  Round& round_;
  int rank_;
  int size_;
};

InProcessGroup::InProcessGroup(int size) : round_(std::make_unique<Round>()) {
  ATTNKIT_CHECK(size >= 1, "in-process group: size (the number of ranks) must be >= 1, got ", size);
  round_->recv.assign(static_cast<size_t>(size), nullptr);
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<Rank>(*round_, r, size));
}

InProcessGroup::~InProcessGroup() = default;

Communicator& InProcessGroup::rank(int r) {
  ATTNKIT_CHECK(r >= 0 && r < size(), "in-process group: rank must be in 0..", size() - 1, ", got ", r);
  return *ranks_[static_cast<size_t>(r)];
}

}  // namespace attnkit
