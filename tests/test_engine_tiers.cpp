// The tier chain on the CPU backend, whose device tier is host memory: engine_tiers_rules.h, in CI.
#define DF_TIER_DEVICE "cpu"
#define DF_TIER_PREFIX Cpu
#include "engine_tiers_rules.h"
