// What the `reference` backend runs: every feature the spec can express, on the CPU.
#pragma once

#include "attnkit/backend.h"

namespace attnkit::reference {

Capabilities capabilities();

}  // namespace attnkit::reference
