// Everything a user of attnkit includes.
#pragma once

#include "attnkit/backend.h"
#include "attnkit/batch.h"
#include "attnkit/communicator.h"
#include "attnkit/compare.h"
#include "attnkit/context_parallel.h"
#include "attnkit/cpu_target.h"
#include "attnkit/dtype.h"
#include "attnkit/error.h"
#include "attnkit/kv_cache.h"
#include "attnkit/merge.h"
#include "attnkit/registry.h"
#include "attnkit/spec.h"
#include "attnkit/tensor.h"
