// The list of backends compiled into this library.
#pragma once

#include "attnkit/registry.h"

namespace attnkit {
void register_builtin_backends(Registry& registry);
}  // namespace attnkit
