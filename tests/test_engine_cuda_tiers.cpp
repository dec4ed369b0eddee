// The tier chain with VRAM slots (engine_tiers_rules.h): label gpu, skipped without a GPU.
#define DF_TIER_DEVICE "cuda"
#define DF_TIER_PREFIX Cuda
#include "engine_tiers_rules.h"
