// The Python Batch: one step's ForwardBatch, filled from the engine's page-table arrays.
#pragma once

#include "attnkit/batch.h"

namespace attnkit::python {

struct PyBatch {
  ForwardBatch batch;
};

}  // namespace attnkit::python
