// The layer split on one GPU standing in for two (cuda:0 named twice): cuda_split_rules.h, label gpu.
#define DF_SPLIT_SECOND "cuda:0"
#include "cuda_split_rules.h"
