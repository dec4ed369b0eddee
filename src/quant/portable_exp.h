#pragma once
// exp(x) in single precision from IEEE-exact operations only (fma, multiply, add, rint, ldexp), so that a
// CUDA kernel and the host give the same bits for the same input. CUDA's own expf goes through the GPU's
// hardware exp2 approximation, whose results the host cannot reproduce; the routed experts' SwiGLU uses this
// instead, so that the host can compute an expert the GPU misses (--cpu-misses) to the GPU's bits
// (backend/cuda_host/warp_order.h). Accuracy: within 2 ulp of exp over the normal range (tested against
// std::exp), like CUDA's expf.
//
// The range reduction and polynomial are Cephes's expf (Moshier): x = n ln2 + r with ln2 split in two so that
// n * C1 is exact, exp(r) = 1 + r + r^2 P(r) on |r| <= ln2 / 2, scaled by 2^n with ldexp (exact).
#include <cmath>

#ifdef __CUDACC__
#define DF_HOST_DEVICE __host__ __device__
#else
#define DF_HOST_DEVICE
#endif

namespace df::quant {

DF_HOST_DEVICE inline float portable_expf(float x) {
  if (x != x) return x;  // NaN
  // Above: exp overflows. Below -86: exp(x) < 2^-124, kept out of the subnormals (flush-to-zero settings may
  // differ between a device and the host); 1 + exp(x) is 1 there already, which is all SwiGLU asks of it.
  if (x > 88.72283935546875f) return INFINITY;
  if (x < -86.0f) return 0.0f;
  const float n = rintf(x * 1.44269504088896341f);
  float r = fmaf(n, -0.693359375f, x);
  r = fmaf(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fmaf(p, r, 1.3981999507e-3f);
  p = fmaf(p, r, 8.3334519073e-3f);
  p = fmaf(p, r, 4.1665795894e-2f);
  p = fmaf(p, r, 1.6666665459e-1f);
  p = fmaf(p, r, 5.0000001201e-1f);
  const float y = fmaf(p, r * r, r) + 1.0f;
  return ldexpf(y, static_cast<int>(n));
}

// SiLU(g) · u as the routed experts' SwiGLU computes it on every backend that must agree bit for bit with
// the CUDA kernels: (g / (1 + exp(-g))) · u.
DF_HOST_DEVICE inline float portable_swiglu(float g, float u) { return g / (1.0f + portable_expf(-g)) * u; }

}  // namespace df::quant
