// What the `cpu` backend runs, written once: capabilities() is what every check and `auto` read.
#pragma once

#include "attnkit/backend.h"

namespace attnkit::cpu {

Capabilities capabilities();

}  // namespace attnkit::cpu
