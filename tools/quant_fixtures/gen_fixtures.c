/*
 * Writes tests/data/quant/ggml_reference.bin: what ggml itself produces for fixed inputs, so that
 * tests/test_quant_ggml_identity.cpp can check diskformer's reference quantizers, dequantizers and scalar dot
 * products bit for bit. Not part of the build: run gen_fixtures.sh, which installs the prebuilt llama.cpp of
 * node-llama-cpp, compiles this file and runs it.
 *
 * It dlopens libggml-base.so (quantize_row_*_ref, dequantize_row_*, the f16/bf16 row converters, the gguf
 * reader) and libggml-cpu-x64.so (the baseline x86-64 CPU variant, whose ggml_vec_dot_* are ggml's generic
 * scalar code; its exported ggml_vec_dot_*_generic are used for the quantized types).
 *
 * File format (little-endian), after the 8-byte magic "DFQFIX01" and a u32 record count, records of
 *   u32 kind, then
 *   kind 1 VECTOR : u32 name_len, name, u32 n, f32[n]                   (inputs; index = order of appearance)
 *   kind 2 QUANT  : u32 ggml_type, u32 vector, u32 nbytes, bytes[nbytes] (ggml's quantization of that vector)
 *   kind 3 DEQUANT: u32 ggml_type, u32 vector, u32 nbytes, bytes[nbytes] (bytes that ggml dequantizes to the
 *                   vector exactly)
 *   kind 4 DOT    : u32 weight_type, u32 weight_vector, u32 act_vector, u32 n, f32 result (ggml's scalar
 *                   vec_dot of the first n values of the QUANT records of the two vectors, the activation in
 *                   the weight type's vec_dot type; F32 uses the vectors themselves)
 *   kind 5 FP16   : u32 n, f32[n], u16 fp16[n], u16 bf16[n]             (ggml_fp32_to_fp16 / ggml_fp32_to_bf16)
 */
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q4_1 = 3, T_Q8_0 = 8, T_Q8_1 = 9, T_Q4_K = 12, T_Q5_K = 13,
       T_Q6_K = 14, T_Q8_K = 15, T_BF16 = 30, T_MXFP4 = 39 };

typedef void (*quantize_fn)(const float *x, void *y, int64_t k);
typedef void (*dequantize_fn)(const void *x, float *y, int64_t k);
typedef void (*vec_dot_fn)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by,
                           int nrc);
struct gguf_init_params { bool no_alloc; void **ctx; };

static void *g_base, *g_cpu;
static void *sym(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) { fprintf(stderr, "missing symbol %s: %s\n", name, dlerror()); exit(1); }
  return p;
}

struct type_info { int type; int block; int bytes; const char *quant; const char *dequant; const char *dot;
                   int act; };
static const struct type_info kTypes[] = {
  {T_F16, 1, 2, NULL, NULL, "ggml_vec_dot_f16", T_F16},
  {T_BF16, 1, 2, NULL, NULL, "ggml_vec_dot_bf16", T_BF16},
  {T_Q4_0, 32, 18, "quantize_row_q4_0_ref", "dequantize_row_q4_0", "ggml_vec_dot_q4_0_q8_0_generic", T_Q8_0},
  {T_Q4_1, 32, 20, "quantize_row_q4_1_ref", "dequantize_row_q4_1", "ggml_vec_dot_q4_1_q8_1_generic", T_Q8_1},
  {T_Q8_0, 32, 34, "quantize_row_q8_0_ref", "dequantize_row_q8_0", "ggml_vec_dot_q8_0_q8_0_generic", T_Q8_0},
  {T_Q8_1, 32, 36, "quantize_row_q8_1_ref", NULL, NULL, -1},
  {T_Q4_K, 256, 144, "quantize_row_q4_K_ref", "dequantize_row_q4_K", "ggml_vec_dot_q4_K_q8_K_generic", T_Q8_K},
  {T_Q5_K, 256, 176, "quantize_row_q5_K_ref", "dequantize_row_q5_K", "ggml_vec_dot_q5_K_q8_K_generic", T_Q8_K},
  {T_Q6_K, 256, 210, "quantize_row_q6_K_ref", "dequantize_row_q6_K", "ggml_vec_dot_q6_K_q8_K_generic", T_Q8_K},
  {T_Q8_K, 256, 292, "quantize_row_q8_K_ref", "dequantize_row_q8_K", NULL, -1},
  {T_MXFP4, 32, 17, "quantize_row_mxfp4_ref", "dequantize_row_mxfp4", "ggml_vec_dot_mxfp4_q8_0_generic", T_Q8_0},
};
enum { N_TYPES = sizeof kTypes / sizeof kTypes[0] };
static const struct type_info *info_of(int type) {
  for (int i = 0; i < N_TYPES; ++i) if (kTypes[i].type == type) return &kTypes[i];
  return NULL;
}

/* ---- output ---- */
static uint8_t *g_out; static size_t g_len, g_cap; static uint32_t g_records;
static void put(const void *p, size_t n) {
  if (g_len + n > g_cap) { g_cap = (g_len + n) * 2; g_out = realloc(g_out, g_cap); }
  memcpy(g_out + g_len, p, n); g_len += n;
}
static void put_u32(uint32_t v) { put(&v, 4); }

/* ---- vectors ---- */
enum { MAX_VECTORS = 64, N = 1024 };
static float *g_vec[MAX_VECTORS]; static int g_vec_n[MAX_VECTORS]; static int g_nvec;
static uint8_t *g_quant[MAX_VECTORS][64]; /* by vector, by ggml type id (< 64) */

static int add_vector(const char *name, const float *v, int n) {
  g_vec[g_nvec] = malloc(sizeof(float) * n); memcpy(g_vec[g_nvec], v, sizeof(float) * n);
  g_vec_n[g_nvec] = n;
  put_u32(1); put_u32((uint32_t)strlen(name)); put(name, strlen(name)); put_u32(n); put(v, sizeof(float) * n);
  ++g_records;
  return g_nvec++;
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t splitmix(void) {
  uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull; z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double uniform01(void) { return (double)(splitmix() >> 11) * 0x1p-53; }
static float normal(void) {
  const double u1 = 1.0 - uniform01(), u2 = uniform01();
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static void quantize_all(int vi) {
  const float *v = g_vec[vi]; const int n = g_vec_n[vi];
  for (int t = 0; t < N_TYPES; ++t) {
    const struct type_info *ti = &kTypes[t];
    if (n % ti->block) continue;
    const size_t nbytes = (size_t)(n / ti->block) * ti->bytes;
    uint8_t *q = calloc(1, nbytes); /* zeroed: ggml's Q8_K leaves bsums of an all-zero block untouched */
    if (ti->type == T_F16) ((void (*)(const float *, uint16_t *, int64_t))sym(g_base, "ggml_fp32_to_fp16_row"))(v, (uint16_t *)q, n);
    else if (ti->type == T_BF16) ((void (*)(const float *, uint16_t *, int64_t))sym(g_base, "ggml_fp32_to_bf16_row_ref"))(v, (uint16_t *)q, n);
    else ((quantize_fn)sym(g_base, ti->quant))(v, q, n);
    put_u32(2); put_u32(ti->type); put_u32(vi); put_u32((uint32_t)nbytes); put(q, nbytes); ++g_records;
    g_quant[vi][ti->type] = q;
  }
}

/* Registers ggml's dequantization of raw blocks as a vector, with a DEQUANT record of the raw bytes. */
static int add_dequantized(const char *name, int type, const uint8_t *raw, int n) {
  const struct type_info *ti = info_of(type);
  float *v = malloc(sizeof(float) * n);
  if (type == T_F16) ((void (*)(const uint16_t *, float *, int64_t))sym(g_base, "ggml_fp16_to_fp32_row"))((const uint16_t *)raw, v, n);
  else ((dequantize_fn)sym(g_base, ti->dequant))(raw, v, n);
  const int vi = add_vector(name, v, n);
  const size_t nbytes = (size_t)(n / ti->block) * ti->bytes;
  put_u32(3); put_u32(type); put_u32(vi); put_u32((uint32_t)nbytes); put(raw, nbytes); ++g_records;
  free(v);
  return vi;
}

/* n values of a golden model's tensor, starting at value `first` (a multiple of the block size). */
static int add_golden(const char *dir, const char *model, const char *tensor, int64_t first, int n) {
  char path[4096]; snprintf(path, sizeof path, "%s/%s.gguf", dir, model);
  struct gguf_init_params params = {true, NULL};
  void *ctx = ((void *(*)(const char *, struct gguf_init_params))sym(g_base, "gguf_init_from_file"))(path, params);
  if (!ctx) { fprintf(stderr, "cannot read %s\n", path); exit(1); }
  const int64_t id = ((int64_t (*)(const void *, const char *))sym(g_base, "gguf_find_tensor"))(ctx, tensor);
  if (id < 0) { fprintf(stderr, "%s: no tensor %s\n", path, tensor); exit(1); }
  const int type = ((int (*)(const void *, int64_t))sym(g_base, "gguf_get_tensor_type"))(ctx, id);
  const size_t data = ((size_t (*)(const void *))sym(g_base, "gguf_get_data_offset"))(ctx);
  const size_t off = ((size_t (*)(const void *, int64_t))sym(g_base, "gguf_get_tensor_offset"))(ctx, id);
  const size_t size = ((size_t (*)(const void *, int64_t))sym(g_base, "gguf_get_tensor_size"))(ctx, id);
  ((void (*)(void *))sym(g_base, "gguf_free"))(ctx);
  const struct type_info *ti = info_of(type);
  if (!ti) { fprintf(stderr, "%s: unexpected type %d\n", tensor, type); exit(1); }
  const size_t start = (size_t)(first / ti->block) * ti->bytes, nbytes = (size_t)(n / ti->block) * ti->bytes;
  if (start + nbytes > size) { fprintf(stderr, "%s: range past the tensor\n", tensor); exit(1); }
  uint8_t *raw = malloc(nbytes);
  FILE *f = fopen(path, "rb");
  if (!f || fseek(f, (long)(data + off + start), SEEK_SET) || fread(raw, 1, nbytes, f) != nbytes) {
    fprintf(stderr, "%s: read failed\n", path); exit(1);
  }
  fclose(f);
  char name[256]; snprintf(name, sizeof name, "%s:%s@%lld", model, tensor, (long long)first);
  const int vi = add_dequantized(name, type, raw, n);
  free(raw);
  return vi;
}

static void add_dot(int wtype, int wv, int av, int n) {
  float s = 0.0f;
  if (wtype == T_F32) {
    ((vec_dot_fn)sym(g_cpu, "ggml_vec_dot_f32"))(n, &s, 0, g_vec[wv], 0, g_vec[av], 0, 1);
  } else {
    const struct type_info *ti = info_of(wtype);
    ((vec_dot_fn)sym(g_cpu, ti->dot))(n, &s, 0, g_quant[wv][wtype], 0, g_quant[av][ti->act], 0, 1);
  }
  put_u32(4); put_u32(wtype); put_u32(wv); put_u32(av); put_u32(n); put(&s, 4); ++g_records;
}

int main(int argc, char **argv) {
  if (argc != 5) { fprintf(stderr, "usage: %s libggml-base.so libggml-cpu-x64.so golden_dir out.bin\n", argv[0]); return 2; }
  g_base = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (!g_base) { fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror()); return 1; }
  g_cpu = dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL);
  if (!g_cpu) { fprintf(stderr, "dlopen %s: %s\n", argv[2], dlerror()); return 1; }
  ((void (*)(void))sym(g_cpu, "ggml_cpu_init"))();
  put("DFQFIX01", 8); put_u32(0);

  float v[N];
  /* (a) random vectors of several distributions */
  for (int i = 0; i < N; ++i) v[i] = normal();
  const int v_normal = add_vector("normal", v, N);
  for (int i = 0; i < N; ++i) v[i] = normal();
  const int v_normal2 = add_vector("normal2", v, N);
  for (int i = 0; i < N; ++i) v[i] = normal() * 1e-3f;
  add_vector("normal_1e-3", v, N);
  for (int i = 0; i < N; ++i) v[i] = normal() * (i % 37 == 5 ? 20.0f : 1.0f);
  const int v_outliers = add_vector("outliers", v, N);
  for (int i = 0; i < N; ++i) v[i] = (float)uniform01();
  add_vector("uniform_positive", v, N);
  for (int i = 0; i < N; ++i) v[i] = (float)uniform01() - 1.0f;
  add_vector("uniform_negative", v, N);
  for (int i = 0; i < N; ++i) v[i] = normal();
  for (int b = 0; b < N / 32; ++b) { /* the extreme of every 32-block is negative */
    float amax = 0; for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(v[32 * b + j]));
    v[32 * b + (b * 7) % 32] = -1.5f * amax;
  }
  const int v_negmax = add_vector("negative_extreme", v, N);
  for (int i = 0; i < N; ++i) { /* blocks: zero, constant, one non-zero, normal, repeating per 64 values */
    const int kind = (i / 64) % 4;
    v[i] = kind == 0 ? 0.0f : kind == 1 ? 0.75f : kind == 2 ? (i % 64 == 9 ? -2.0f : 0.0f) : normal();
  }
  add_vector("zeros_constants", v, N);
  for (int i = 0; i < N; ++i) v[i] = normal() * 1e-6f;
  add_vector("tiny_1e-6", v, N);
  for (int i = 0; i < N; ++i) v[i] = normal() * 1e-20f;
  add_vector("tiny_1e-20", v, N);
  for (int i = 0; i < N; ++i) v[i] = normal() * 3e4f;
  add_vector("huge_3e4", v, N);
  for (int i = 0; i < N; ++i) v[i] = normal() * 1e8f;
  add_vector("huge_1e8", v, N);
  for (int i = 0; i < N; ++i) { /* halves: with the extreme at +-127 every q8 quant is a tie */
    v[i] = (float)((int)(splitmix() % 253) - 126) + 0.5f;
    if (i % 32 == 3) v[i] = (i / 32) % 2 ? 127.0f : -127.0f;
  }
  const int v_ties = add_vector("q8_ties", v, N);
  for (int i = 0; i < N; ++i) v[i] = splitmix() % 29 == 0 ? normal() : 0.0f;
  add_vector("sparse", v, N);

  /* (b) rows of the golden models, dequantized by ggml */
  const char *golden = argv[3];
  const int g_q6k = add_golden(golden, "lfm2moe-tiny", "token_embd.weight", 100 * 256, N);
  const int g_q40 = add_golden(golden, "lfm2moe-tiny", "blk.2.ffn_gate_exps.weight", 3 * 128 * 256, N);
  add_golden(golden, "lfm2moe-tiny", "blk.3.ffn_down_exps.weight", 7 * 256 * 128 + 128 * 40, N);
  const int g_mx = add_golden(golden, "gpt-oss-tiny", "blk.0.ffn_gate_exps.weight", 5 * 128 * 256, N);
  const int g_q80 = add_golden(golden, "gpt-oss-tiny", "blk.1.attn_q.weight", 7 * 256, N);
  const int g_f16 = add_golden(golden, "lfm2moe-tiny-f16", "blk.2.ffn_up_exps.weight", 2 * 128 * 256, N);

  for (int vi = 0; vi < g_nvec; ++vi) quantize_all(vi);

  /* ggml's dequantization of its own quantization of "normal", for every type */
  for (int t = 0; t < N_TYPES; ++t) {
    if (!kTypes[t].dequant) continue;
    char name[64]; snprintf(name, sizeof name, "dequant_of_normal_%d", kTypes[t].type);
    const int vi = add_dequantized(name, kTypes[t].type, g_quant[v_normal][kTypes[t].type], N);
    (void)vi;
  }

  /* scalar dot products */
  const int weight_types[] = {T_F32, T_F16, T_BF16, T_Q4_0, T_Q4_1, T_Q8_0, T_Q4_K, T_Q5_K, T_Q6_K, T_MXFP4};
  const int acts[] = {v_normal2, v_outliers, v_ties, v_negmax};
  const int weights[] = {v_normal, v_outliers, v_negmax, g_q6k, g_q40, g_mx, g_q80, g_f16};
  for (size_t w = 0; w < sizeof weight_types / sizeof *weight_types; ++w)
    for (size_t i = 0; i < sizeof weights / sizeof *weights; ++i)
      for (size_t a = 0; a < sizeof acts / sizeof *acts; ++a) {
        add_dot(weight_types[w], weights[i], acts[a], N);
        add_dot(weight_types[w], weights[i], acts[a], 256);
      }

  /* f16 / bf16 rounding of tricky floats: ties, subnormals, overflow, signed zeros and infinities */
  enum { NF = 64 };
  float f[NF]; uint16_t h[NF], b[NF]; int nf = 0;
  const uint32_t bits[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x33000000u, 0x33000001u,
                           0x337fffffu, 0x33c00000u, 0x387fc000u, 0x387fe000u, 0x38800000u, 0x477fe000u,
                           0x477fefffu, 0x477ff000u, 0x7f7fffffu, 0x3f801000u, 0x3f803000u, 0x3f801001u,
                           0xbf805000u, 0x3f808000u, 0x3f818000u, 0x3f808001u, 0x00000001u, 0x007fffffu,
                           0x00800000u, 0x7f7f8000u, 0x7f7f7fffu, 0xc0490fdbu};
  for (size_t i = 0; i < sizeof bits / sizeof *bits; ++i) memcpy(&f[nf++], &bits[i], 4);
  while (nf < NF) f[nf++] = normal() * 100.0f;
  for (int i = 0; i < NF; ++i) {
    h[i] = ((uint16_t (*)(float))sym(g_base, "ggml_fp32_to_fp16"))(f[i]);
    b[i] = ((uint16_t (*)(float))sym(g_base, "ggml_fp32_to_bf16"))(f[i]);
  }
  put_u32(5); put_u32(NF); put(f, sizeof f); put(h, sizeof h); put(b, sizeof b); ++g_records;

  memcpy(g_out + 8, &g_records, 4);
  FILE *out = fopen(argv[4], "wb");
  if (!out || fwrite(g_out, 1, g_len, out) != g_len || fclose(out)) { fprintf(stderr, "cannot write %s\n", argv[4]); return 1; }
  printf("wrote %s: %u records, %zu bytes\n", argv[4], g_records, g_len);
  return 0;
}
