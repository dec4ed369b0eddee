// The experts library is its interface (expert_provider.h); this file gives CMake a source to build it from.
#include "experts/expert_provider.h"
