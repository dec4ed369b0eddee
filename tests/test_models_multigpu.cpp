// The layer split over two GPUs (cuda:0, cuda:1): cuda_split_rules.h, label multigpu (ctest -L multigpu on a
// machine with two or more GPUs; skipped, saying why, elsewhere).
#define DF_SPLIT_SECOND "cuda:1"
#include "cuda_split_rules.h"
