// Memory read bandwidth: the time to sum a large array of 64-bit words, with 1..N OpenMP threads, best of R
// passes. This is the ceiling for any decode step that must stream its weights from RAM (bytes read / this
// rate = the least possible time). Built and run by membw.sh; prints one JSON line per thread count.
#include <omp.h>
#include <string.h>
#include <sys/mman.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long parse_positive(const char* text, const char* what) {
  char* end = NULL;
  long value = strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 1) {
    fprintf(stderr, "membw: %s must be a positive integer, got '%s'\n", what, text);
    exit(2);
  }
  return value;
}

// One timed pass. Integer addition is associative, so the simd reduction may vectorize without changing the
// result; the sum is returned and printed so the compiler cannot drop the loads.
static uint64_t sum_words(const uint64_t* words, size_t count, int threads) {
  uint64_t sum = 0;
#pragma omp parallel for simd num_threads(threads) schedule(static) reduction(+ : sum)
  for (size_t i = 0; i < count; i++) sum += words[i];
  return sum;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: membw SIZE_MIB REPEATS THREADS...\n");
    return 2;
  }
  size_t size_mib = (size_t)parse_positive(argv[1], "SIZE_MIB");
  long repeats = parse_positive(argv[2], "REPEATS");
  size_t bytes = size_mib << 20;
  size_t count = bytes / sizeof(uint64_t);

  // 2 MiB-aligned and on transparent huge pages when HUGE=1 (as diskformer holds its weights): with 4 KiB
  // pages the hardware prefetchers stop at every page and the figure is the small-page ceiling instead.
  const char* huge_env = getenv("HUGE");
  const int huge = huge_env != NULL && strcmp(huge_env, "1") == 0;
  uint64_t* words = aligned_alloc(huge ? (size_t)2 << 20 : 4096, bytes);
  if (words == NULL) {
    fprintf(stderr, "membw: cannot allocate %zu MiB\n", size_mib);
    return 1;
  }
  if (huge) madvise(words, bytes, MADV_HUGEPAGE);
  // Touch every page first (from all threads, matching the static schedule) so page faults are not timed.
  int max_threads = omp_get_max_threads();
#pragma omp parallel for num_threads(max_threads) schedule(static)
  for (size_t i = 0; i < count; i++) words[i] = (uint64_t)i;

  for (int arg = 3; arg < argc; arg++) {
    int threads = (int)parse_positive(argv[arg], "THREADS");
    double best = 1e30;
    sum_words(words, count, threads);  // warm-up: starts the thread team, fills TLBs
    for (long r = 0; r < repeats; r++) {
      double start = now_seconds();
      uint64_t sum = sum_words(words, count, threads);
      double seconds = now_seconds() - start;
      // words[i] = i, so the sum is count * (count - 1) / 2 (mod 2^64; count is even): a wrong loop shows
      // here.
      if (sum != (uint64_t)(count / 2) * (uint64_t)(count - 1)) {
        fprintf(stderr, "membw: wrong sum %llu with %d threads\n", (unsigned long long)sum, threads);
        return 1;
      }
      if (seconds < best) best = seconds;
    }
    printf(
        "{\"tool\":\"membw\",\"threads\":%d,\"read_gbps\":%.2f,\"best_s\":%.4f,\"size_mib\":%zu,"
        "\"repeats\":%ld,\"huge_pages\":%s}\n",
        threads, (double)bytes / best / 1e9, best, size_mib, repeats, huge ? "true" : "false");
    fflush(stdout);
  }
  free(words);
  return 0;
}
