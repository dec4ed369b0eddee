#pragma once
// Whole-number settings read from the environment (tuning knobs such as DF_CPU_TASKS_PER_THREAD).

namespace df {

// The variable's value as an integer in [lo, hi], or `fallback` when it is unset or empty. Throws df::Error
// ("NAME=VALUE is not a whole number from LO to HI") for anything else.
int env_int(const char* name, int lo, int hi, int fallback);

}  // namespace df
