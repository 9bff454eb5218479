// Fused block-sparse decode attention over paged, mixed-tier KV blocks, for the CPU.
//
// Same semantics as kernels/reference.py (read its module docstring): paged K/V [P, BS, H, D],
// per-source block tables [B, H, M] (-1 = padding) and seq_lens [B, H], one query token per
// sequence with GQA. Per (batch, KV head, split of the listed blocks) one pass reads each listed
// block once: the codes (uint8, INT4 nibbles, INT2 crumbs, FP8 e4m3 bytes) or bf16/fp16/fp32 rows become
// floats in registers, dotted with all G query heads of the group at once (keys: the per-channel
// group scale is folded into the query once per token group, the zero point into one bias per
// group), then an online softmax and the value accumulation (values dequantized per 16-channel chunk
// in registers, outlier channels patched in) follow. Splits merge by log-sum-exp at the end.
//
// Fast mode (INT8/INT4/INT2 keys, INT4/INT2 values): keys are dotted on VNNI with the group-scaled query
// in int8, 16 rows at a time transposed so tokens sit in lanes (no horizontal sums); INT4 and INT2
// values on vdpbf16ps, 64 channels per pass. quest_select fuses the Quest block bounds and the top-k block selection.
//
// Written with GCC/Clang vector extensions (16 floats = one AVX-512 register) so -march=native
// picks the widest ISA available; only the fp16 conversion uses an intrinsic when present.
// The Python side passes raw pointers (no torch headers: the build takes seconds, not a minute).

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#if defined(__SSE2__) || defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

typedef float vf __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));
typedef uint32_t vu __attribute__((vector_size(64)));
typedef uint8_t vb __attribute__((vector_size(16)));
typedef uint16_t vh __attribute__((vector_size(32)));

constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
constexpr int MAX_OUT = 64;
constexpr int PREFETCH_AHEAD = 1;  // blocks ahead (2 and 4 measured no better on a shared EPYC)

// Storage kinds (must match kernels/cpu_decode.py).
// Quantized kinds are >= K_INT8 (codes with scales); all but K_FP8 have zero points. INT4 packs two
// codes per byte, INT2 four (code i of a run in bits 2i), along tokens for keys, channels for values.
enum Kind { K_F32 = 0, K_BF16 = 1, K_F16 = 2, K_INT8 = 3, K_INT4 = 4, K_FP8 = 5, K_INT2 = 6 };
// Codes per stored byte of a kind.
constexpr int codes_per_byte(int kind) { return kind == K_INT4 ? 2 : (kind == K_INT2 ? 4 : 1); }
// Dtypes of scales / zero points / outlier values.
enum PDtype { P_F32 = 0, P_BF16 = 1, P_F16 = 2 };

template <class V>
inline V loadv(const void* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}
inline void storev(float* p, vf v) { std::memcpy(p, &v, sizeof(vf)); }
inline vf splat(float x) { return vf{} + x; }
inline vf vmax(vf a, vf b) { return a > b ? a : b; }
inline vf vmin(vf a, vf b) { return a < b ? a : b; }
inline vf lane_index() { return vf{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}; }

inline float hsum(vf v) {
  vf a = v + __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  a = a + __builtin_shufflevector(a, a, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
  a = a + __builtin_shufflevector(a, a, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
  a = a + __builtin_shufflevector(a, a, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
  return a[0];
}

inline float hmax(vf v) {
  vf a = vmax(v, __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
  a = vmax(a, __builtin_shufflevector(a, a, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
  a = vmax(a, __builtin_shufflevector(a, a, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
  a = vmax(a, __builtin_shufflevector(a, a, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
  return a[0];
}

// Sixteen horizontal sums at once: lane i of the result is the sum of a[i] (a transpose-add tree,
// 45 shuffles/adds instead of 16 separate reductions).
template <class V>
inline V reduce16(const V* a) {
  V x[8], y[4], z[2];
  for (int i = 0; i < 8; ++i)
    x[i] = __builtin_shufflevector(a[2 * i], a[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
           __builtin_shufflevector(a[2 * i], a[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  for (int i = 0; i < 4; ++i)
    y[i] = __builtin_shufflevector(x[2 * i], x[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
           __builtin_shufflevector(x[2 * i], x[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  for (int i = 0; i < 2; ++i)
    z[i] = __builtin_shufflevector(y[2 * i], y[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
           __builtin_shufflevector(y[2 * i], y[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
  return __builtin_shufflevector(z[0], z[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
         __builtin_shufflevector(z[0], z[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}

// exp(x), about 2 ulp, for x in [-87, 88] (clamped outside): Cody-Waite reduction + degree-6 poly.
inline vf vexp(vf x) {
  x = vmin(vmax(x, splat(-87.0f)), splat(88.0f));
  const vf shifter = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  vf n = (x * 1.44269504088896341f + shifter) - shifter;
  vf r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  vf p = splat(1.0f / 720);
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  vi e = (__builtin_convertvector(n, vi) + 127) << 23;
  return p * (vf)e;
}

inline float half_to_float(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (man << 13);
  } else if (exp) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else {
    float f = std::ldexp(float(man), -24);
    return sign ? -f : f;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

inline float bf16_to_float(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float param_at(const void* p, int dtype, int64_t i) {
  switch (dtype) {
    case P_BF16:
      return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case P_F16:
      return half_to_float(static_cast<const uint16_t*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

inline vf bf16x16(const void* p) { return (vf)(__builtin_convertvector(loadv<vh>(p), vu) << 16); }

inline vf f16x16(const void* p) {
#if defined(__AVX512F__)
  return (vf)_mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
#else
  const uint16_t* h = static_cast<const uint16_t*>(p);
  vf r;
  for (int i = 0; i < 16; ++i) r[i] = half_to_float(h[i]);
  return r;
#endif
}

inline vf params16(const void* p, int dtype, int64_t i) {
  switch (dtype) {
    case P_BF16:
      return bf16x16(static_cast<const uint16_t*>(p) + i);
    case P_F16:
      return f16x16(static_cast<const uint16_t*>(p) + i);
    default:
      return loadv<vf>(static_cast<const float*>(p) + i);
  }
}

// GCC scalarises a direct uint8 -> float vector conversion (and sometimes one through int32).
inline vf u8x16(vb b) {
#if defined(__AVX512F__)
  return (vf)_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32((__m128i)b));
#else
  return __builtin_convertvector(__builtin_convertvector(b, vi), vf);
#endif
}

// Sixteen 4-bit codes packed in 8 bytes, even element in the low nibble.
inline vf u4x16(const uint8_t* p) {
#if defined(__SSE2__)
  __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i low = _mm_set1_epi8(15);
  __m128i lo = _mm_and_si128(b, low), hi = _mm_and_si128(_mm_srli_epi16(b, 4), low);
  return u8x16((vb)_mm_unpacklo_epi8(lo, hi));
#else
  vb x;
  for (int i = 0; i < 8; ++i) {
    x[2 * i] = p[i] & 15;
    x[2 * i + 1] = p[i] >> 4;
  }
  return u8x16(x);
#endif
}

// Sixteen 2-bit codes packed in 4 bytes, code i of each byte in bits 2i: the 4 bytes broadcast to
// every lane, lane l shifted right by 8 (l / 4) + 2 (l % 4).
inline vf u2x16(const uint8_t* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  const vu shifts = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
  return __builtin_convertvector((vi)(((vu{} + w) >> shifts) & 3), vf);
}

// float8 e4m3fn: the 7 magnitude bits placed at the top of an fp32 mantissa/exponent give the value
// times 2^-120 (normals and subnormals alike); NaN (0x7F) never appears: quantize clamps to 448.
inline vf fp8x16(vb b) {
#if defined(__AVX512F__)
  vu u = (vu)_mm512_cvtepu8_epi32((__m128i)b);
#else
  vu u = (vu)__builtin_convertvector(b, vi);
#endif
  vf mag = (vf)((u & 0x7F) << 20) * 0x1p120f;
  return (vf)((vu)mag | ((u & 0x80) << 24));
}

// One storage operand (K or V of one source), as passed from Python.
struct Operand {
  int kind = K_F32;
  const uint8_t* data = nullptr;
  const void* scale = nullptr;
  const void* zero = nullptr;
  int pdtype = P_F32;
  int group = 1;
  const int64_t* oidx = nullptr;  // [H, n_out]
  const void* oval = nullptr;     // [P, BS, H, n_out]
  int odtype = P_F32;
  int n_out = 0;
  // Value params' strides (page, token, head), in params; the group axis is contiguous. Head-major
  // storage makes one (block, head)'s params one run instead of a cache line per token.
  int64_t ps_page = 0, ps_tok = 0, ps_head = 0;
};

struct Source {
  Operand k, v;
  const int64_t* table = nullptr;  // [B, H, M]
  const int64_t* seq = nullptr;    // [B, H]
  int64_t width = 0;
  int bs = 0;
};

// Rows of one (block, head) slice of paged keys, as floats: values (full precision) or codes.
template <int KIND>
struct KeyRows {
  const uint8_t* base;  // first (packed) row of the slice
  int64_t stride;       // bytes between (packed) rows
  inline vf load(int t, int c) const {
    if constexpr (KIND == K_F32) return loadv<vf>(base + t * stride + 64 * c);
    if constexpr (KIND == K_BF16) return bf16x16(base + t * stride + 32 * c);
    if constexpr (KIND == K_F16) return f16x16(base + t * stride + 32 * c);
    if constexpr (KIND == K_INT8) return u8x16(loadv<vb>(base + t * stride + 16 * c));
    if constexpr (KIND == K_FP8) return fp8x16(loadv<vb>(base + t * stride + 16 * c));
    if constexpr (KIND == K_INT4) {  // packed along tokens: even token in the low nibble
      vb b = loadv<vb>(base + (t >> 1) * stride + 16 * c);
      return u8x16((t & 1) ? vb(b >> 4) : vb(b & 15));
    }
    if constexpr (KIND == K_INT2) {  // packed along tokens: token 4r + i in bits 2i of row r
      vb b = loadv<vb>(base + (t >> 2) * stride + 16 * c);
      return u8x16(vb(b >> (2 * (t & 3))) & 3);
    }
  }
};

// Rows of one (block, head) slice of paged values, dequantized to floats chunk by chunk. The
// block's scales, zero points and outlier values were converted to fp32 beforehand (State).
template <int KIND>
struct ValueRows {
  const uint8_t* base;  // first row of the slice
  int64_t stride;       // bytes between rows
  const float* scale;   // [nv][n_groups], or [nv][D] when groups are narrower than 16 channels
  const float* zero;
  int n_groups;
  bool per_lane;
  const float* oval;    // [nv][n_out]
  int n_out;
  uint64_t out_chunks;  // bit c: chunk c holds an outlier channel
  const int* ochunk;    // chunk and lane of each outlier channel
  const int* olane;

  inline vf codes(int t, int c) const {
    const uint8_t* row = base + t * stride;
    if constexpr (KIND == K_F32) return loadv<vf>(row + 64 * c);
    if constexpr (KIND == K_BF16) return bf16x16(row + 32 * c);
    if constexpr (KIND == K_F16) return f16x16(row + 32 * c);
    if constexpr (KIND == K_INT8) return u8x16(loadv<vb>(row + 16 * c));
    if constexpr (KIND == K_FP8) return fp8x16(loadv<vb>(row + 16 * c));
    if constexpr (KIND == K_INT4) return u4x16(row + 8 * c);  // packed along channels
    if constexpr (KIND == K_INT2) return u2x16(row + 4 * c);  // packed along channels
  }

  // Chunk c of row t; j is the channel group of the chunk (when groups are >= 16 channels).
  inline vf load(int t, int c, int j) const {
    vf x = codes(t, c);
    if constexpr (KIND >= K_INT8) {
      vf sv, zv = vf{};
      if (!per_lane) {
        sv = splat(scale[t * n_groups + j]);
        if constexpr (KIND != K_FP8) zv = splat(zero[t * n_groups + j]);
      } else {
        sv = loadv<vf>(scale + t * n_groups + 16 * c);
        if constexpr (KIND != K_FP8) zv = loadv<vf>(zero + t * n_groups + 16 * c);
      }
      x = x * sv + zv;
      if (out_chunks >> c & 1)
        for (int i = 0; i < n_out; ++i)
          if (ochunk[i] == c) x = lane_index() == float(olane[i]) ? splat(oval[t * n_out + i]) : x;
    }
    return x;
  }
};

// S[g][t] = sum_d qe[g][d] * row_t[d] for t in [t0, t1): T tokens x G heads per step, 16 sums
// reduced together. qe rows have stride D; [t0, t1) is a multiple of T.
template <int G, int T, int KIND>
void key_dots(const KeyRows<KIND>& rows, int t0, int t1, int D, const float* qe, float* S, int ldS) {
  const int C = D / 16;
  for (int tt = t0; tt < t1; tt += T) {
    vf acc[T * G];
#pragma GCC unroll 16
    for (int i = 0; i < T * G; ++i) acc[i] = vf{};
    for (int c = 0; c < C; ++c) {
      vf qv[G];
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) qv[g] = loadv<vf>(qe + g * D + 16 * c);
      if constexpr (KIND == K_INT4 && T % 2 == 0) {  // one packed row = two tokens
#pragma GCC unroll 8
        for (int t = 0; t < T; t += 2) {
          vb b = loadv<vb>(rows.base + ((tt + t) >> 1) * rows.stride + 16 * c);
          vf k0 = u8x16(b & 15), k1 = u8x16(vb(b >> 4) & 15);
#pragma GCC unroll 8
          for (int g = 0; g < G; ++g) {
            acc[t * G + g] += qv[g] * k0;
            acc[(t + 1) * G + g] += qv[g] * k1;
          }
        }
      } else if constexpr (KIND == K_INT2 && T % 4 == 0) {  // one packed row = four tokens
#pragma GCC unroll 4
        for (int t = 0; t < T; t += 4) {
          const vb b = loadv<vb>(rows.base + ((tt + t) >> 2) * rows.stride + 16 * c);
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            const vf k = u8x16(vb(b >> (2 * i)) & 3);
#pragma GCC unroll 8
            for (int g = 0; g < G; ++g) acc[(t + i) * G + g] += qv[g] * k;
          }
        }
      } else {
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) {
          vf k = rows.load(tt + t, c);
#pragma GCC unroll 8
          for (int g = 0; g < G; ++g) acc[t * G + g] += qv[g] * k;
        }
      }
    }
    if constexpr (T * G == 16) {
#if defined(__AVX512F__)
      // Lane t * G + g of the reduction -> lane g * T + t, then head g's T lanes in one masked store.
      static const __m512i to_heads = [] {
        alignas(64) int32_t ix[16];
        for (int g = 0; g < G; ++g)
          for (int t = 0; t < T; ++t) ix[g * T + t] = t * G + g;
        return _mm512_load_si512(ix);
      }();
      const __m512 r = _mm512_permutexvar_ps(to_heads, (__m512)reduce16(acc));
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) _mm512_mask_storeu_ps(S + g * ldS + tt - g * T, __mmask16(((1u << T) - 1) << (g * T)), r);
#else
      vf r = reduce16(acc);
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t)
#pragma GCC unroll 8
        for (int g = 0; g < G; ++g) S[g * ldS + tt + t] = r[t * G + g];
#endif
    } else {
      for (int t = 0; t < T; ++t)
        for (int g = 0; g < G; ++g) S[g * ldS + tt + t] = hsum(acc[t * G + g]);
    }
  }
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define MINUTIA_VNNI 1
// Fast mode, INT8/INT4 keys: S[g][t] = sq[g] * sum_d qi[g][d] * code_t[d] + bias[g], the dot products
// u8 codes x s8 query on VNNI (64 products per instruction, no code-to-float conversion). qi rows have
// stride Dp (D rounded up to 64, zero padded); [t0, t1) is a multiple of T (even: INT4 rows are pairs).
template <int G, int T, int KIND>
void key_dots_i8(const uint8_t* base, int64_t stride, int t0, int t1, int D, int Dp, const int8_t* qi,
                 const float* sq, const float* bias, float* S, int ldS) {
  const int C = Dp / 64;
  const __mmask64 tail = D % 64 ? ~0ULL >> (64 - D % 64) : ~0ULL;  // do not read past a row's end
  constexpr int step = codes_per_byte(KIND);  // tokens per packed row
  static_assert(T % step == 0, "a tile holds whole packed rows");
  const __m512i mask = _mm512_set1_epi8(KIND == K_INT2 ? 3 : 15);
  for (int tt = t0; tt < t1; tt += T) {
    vi acc[T * G];
#pragma GCC unroll 16
    for (int i = 0; i < T * G; ++i) acc[i] = vi{};
    for (int c = 0; c < C; ++c) {
      const __mmask64 m = c == C - 1 ? tail : ~0ULL;
      __m512i qv[G];
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) qv[g] = _mm512_loadu_si512(qi + g * Dp + 64 * c);
#pragma GCC unroll 16
      for (int t = 0; t < T; t += step) {
        // One packed row = `step` tokens: token i of the row in bits (8 / step) i of each byte.
        const __m512i row = _mm512_maskz_loadu_epi8(m, base + ((tt + t) / step) * stride + 64 * c);
        __m512i k[step];
        k[0] = step == 1 ? row : _mm512_and_si512(row, mask);
#pragma GCC unroll 4
        for (int i = 1; i < step; ++i) k[i] = _mm512_and_si512(_mm512_srli_epi16(row, (8 / step) * i), mask);
#pragma GCC unroll 4
        for (int i = 0; i < step; ++i)
#pragma GCC unroll 8
          for (int g = 0; g < G; ++g)
            acc[(t + i) * G + g] = (vi)_mm512_dpbusd_epi32((__m512i)acc[(t + i) * G + g], k[i], qv[g]);
      }
    }
    static_assert(T * G == 16, "one reduction per tile");
    // Lane t * G + g of the reduction -> lane g * T + t, then head g's T lanes in one masked store.
    static const __m512i to_heads = [] {
      alignas(64) int32_t ix[16];
      for (int g = 0; g < G; ++g)
        for (int t = 0; t < T; ++t) ix[g * T + t] = t * G + g;
      return _mm512_load_si512(ix);
    }();
    const __m512 r = _mm512_permutexvar_ps(to_heads, _mm512_cvtepi32_ps((__m512i)reduce16(acc)));
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g)
      _mm512_mask_storeu_ps(S + g * ldS + tt - g * T, __mmask16(((1u << T) - 1) << (g * T)),
                            _mm512_fmadd_ps(r, _mm512_set1_ps(sq[g]), _mm512_set1_ps(bias[g])));
  }
}

// The same dot products with tokens in lanes: 16 rows of one token group (16 tokens for INT8, 32 for
// INT4: a packed row holds two) are loaded 64 bytes at a time and transposed as a 16 x 16 matrix of
// dwords, so each vector holds 4 channels of the 16 rows and one VNNI instruction with the query's 4
// channels broadcast adds them for every row: no horizontal reductions, and the transposition is
// shared by the G heads. Rows [r0, r0 + 16) must exist in the block (the group's rows).
inline void transpose16(__m512i* r) {
  __m512i t[16], u[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {  // u[4i + k], 128-bit lane L: rows 4i..4i+3 of column 4L + k
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {  // r[4L + k]: rows 0..15 of column 4L + k
    const __m512i x0 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x44), x1 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0x44);
    const __m512i x2 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xEE), x3 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0xEE);
    r[k] = _mm512_shuffle_i32x4(x0, x1, 0x88);
    r[4 + k] = _mm512_shuffle_i32x4(x0, x1, 0xDD);
    r[8 + k] = _mm512_shuffle_i32x4(x2, x3, 0x88);
    r[12 + k] = _mm512_shuffle_i32x4(x2, x3, 0xDD);
  }
}

template <int G, int KIND>
void key_dots_i8_t(const uint8_t* base, int64_t stride, int r0, int D, int Dp, const int8_t* qi, const float* sq,
                   const float* bias, float* S, int ldS) {
  constexpr int NA = codes_per_byte(KIND);  // accumulators per head: token i of each packed row
  const int C = Dp / 64;
  const __mmask64 tail = D % 64 ? ~0ULL >> (64 - D % 64) : ~0ULL;
  const __m512i mask = _mm512_set1_epi8(KIND == K_INT2 ? 3 : 15);
  __m512i acc[NA * G];
#pragma GCC unroll 16
  for (int i = 0; i < NA * G; ++i) acc[i] = _mm512_setzero_si512();
  for (int c = 0; c < C; ++c) {
    const __mmask64 m = c == C - 1 ? tail : ~0ULL;
    __m512i x[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) x[r] = _mm512_maskz_loadu_epi8(m, base + (r0 + r) * stride + 64 * c);
    transpose16(x);
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      __m512i k[NA];
      k[0] = NA == 1 ? x[j] : _mm512_and_si512(x[j], mask);
#pragma GCC unroll 4
      for (int i = 1; i < NA; ++i) k[i] = _mm512_and_si512(_mm512_srli_epi16(x[j], (8 / NA) * i), mask);
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
        int32_t qw;
        std::memcpy(&qw, qi + g * Dp + 64 * c + 4 * j, 4);
        const __m512i qb = _mm512_set1_epi32(qw);
#pragma GCC unroll 4
        for (int i = 0; i < NA; ++i) acc[NA * g + i] = _mm512_dpbusd_epi32(acc[NA * g + i], k[i], qb);
      }
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    const __m512 s = _mm512_set1_ps(sq[g]), b = _mm512_set1_ps(bias[g]);
    const __m512 e = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[NA * g]), s, b);
    if constexpr (KIND == K_INT4) {
      const __m512 o = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[NA * g + 1]), s, b);
      const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
      const __m512i hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
      _mm512_storeu_ps(S + g * ldS + 2 * r0, _mm512_permutex2var_ps(e, lo, o));
      _mm512_storeu_ps(S + g * ldS + 2 * r0 + 16, _mm512_permutex2var_ps(e, hi, o));
    } else if constexpr (KIND == K_INT2) {
      // Lane r of accumulator i is token 4 (r0 + r) + i: interleave the four as pairs (0, 1) and
      // (2, 3), then the pairs as 64-bit units.
      const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
      const __m512i hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
      const __m512i q0 = _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0), q1 = _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4);
      __m512 t[4];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) t[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[NA * g + i]), s, b);
      const __m512d a0 = _mm512_castps_pd(_mm512_permutex2var_ps(t[0], lo, t[1]));
      const __m512d a1 = _mm512_castps_pd(_mm512_permutex2var_ps(t[0], hi, t[1]));
      const __m512d b0 = _mm512_castps_pd(_mm512_permutex2var_ps(t[2], lo, t[3]));
      const __m512d b1 = _mm512_castps_pd(_mm512_permutex2var_ps(t[2], hi, t[3]));
      float* o = S + g * ldS + 4 * r0;
      _mm512_storeu_pd(o, _mm512_permutex2var_pd(a0, q0, b0));
      _mm512_storeu_pd(o + 16, _mm512_permutex2var_pd(a0, q1, b0));
      _mm512_storeu_pd(o + 32, _mm512_permutex2var_pd(a1, q0, b1));
      _mm512_storeu_pd(o + 48, _mm512_permutex2var_pd(a1, q1, b1));
    } else {
      _mm512_storeu_ps(S + g * ldS + r0, e);
    }
  }
}

// qi[g] = round(qe[g] / sq[g]) as int8, sq[g] = max |qe[g]| / 127: the query of one token group, with
// the key scales folded in, quantized per head (error r_d at most sq / 2 per channel). The logit error
// sum_d r_d code_d is taken back exactly for codes at mid-range (bias[g] += mid * sum_d r_d), leaving
// sum_d r_d (code_d - mid): a third of it for typical codes.
template <int G>
void quantize_query(const float* qe, int D, int Dp, float mid, int8_t* qi, float* sq, float* bias) {
  for (int g = 0; g < G; ++g) {
    vf mx = vf{};
    for (int c = 0; c < D / 16; ++c) {
      vf x = loadv<vf>(qe + g * D + 16 * c);
      mx = vmax(mx, vmax(x, -x));
    }
    const float amax = hmax(mx);
    sq[g] = amax / 127.0f;
    const vf inv = splat(amax > 0 ? 127.0f / amax : 0.0f);
    vf r = vf{};
    for (int c = 0; c < D / 16; ++c) {
      const vf x = loadv<vf>(qe + g * D + 16 * c);
      const __m512i n = _mm512_cvtps_epi32((__m512)(x * inv));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qi + g * Dp + 16 * c), _mm512_cvtsepi32_epi8(n));
      r += x - __builtin_convertvector((vi)n, vf) * sq[g];
    }
    bias[g] += mid * hsum(r);
    std::memset(qi + g * Dp + D, 0, Dp - D);
  }
}

// The fold and quantize_query for the G heads together, from the group's key scales and zero points
// as fp32 (sv, zv): bias[g] = q.z + mid * sum_d r_d, with sum_d r_d = sum_d x_d - sq * sum_d qi_d, and
// the int8 rows packed 64 channels at a time (two saturating packs and one dword permute). The heads
// go side by side so their horizontal max / sums (long latency chains) overlap, and the final sums of
// all heads are one reduce16 instead of 2 G separate reductions.
template <int G>
void prep_query_i8(const float* qm, const float* sv, const float* zv, int D, int Dp, float mid, float* tmp,
                   int8_t* qi, float* sq, float* bias) {
  static_assert(G <= 8, "one reduce16 for 2 G sums");
  const int C = D / 16;
  const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  const __m512i ones = _mm512_set1_epi8(1);
  vf mx[G], b[G];  // per head: max |x|, sum q z + mid x
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) mx[g] = b[g] = vf{};
  for (int c = 0; c < C; ++c) {
    const vf s = loadv<vf>(sv + 16 * c), z = loadv<vf>(zv + 16 * c);
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const vf qv = loadv<vf>(qm + g * D + 16 * c), x = qv * s;
      storev(tmp + g * D + 16 * c, x);
      mx[g] = vmax(mx[g], (vf)((vu)x & 0x7FFFFFFFu));
      b[g] += qv * z + mid * x;
    }
  }
  vf part[16];
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    const float amax = hmax(mx[g]);
    sq[g] = amax / 127.0f;
    const __m512 inv = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
    __m512i ns = _mm512_setzero_si512();
    for (int c = 0; c < Dp / 16; c += 4) {
      __m512i n[4];
#pragma GCC unroll 4
      for (int m = 0; m < 4; ++m)
        n[m] = c + m < C ? _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(tmp + g * D + 16 * (c + m)), inv))
                         : _mm512_setzero_si512();
      // dword 4L + m of the packed vector holds channels 16m + 4L .. +3: back to channel order.
      const __m512i p = _mm512_permutexvar_epi32(
          order, _mm512_packs_epi16(_mm512_packs_epi32(n[0], n[1]), _mm512_packs_epi32(n[2], n[3])));
      _mm512_storeu_si512(qi + g * Dp + 16 * c, p);
      ns = _mm512_dpbusd_epi32(ns, ones, p);
    }
    part[g] = b[g];
    part[8 + g] = (vf)_mm512_cvtepi32_ps(ns);  // |sum| <= 127 D: exact in fp32
  }
#pragma GCC unroll 8
  for (int g = G; g < 8; ++g) part[g] = part[8 + g] = vf{};
  const vf r = reduce16(part);
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) bias[g] = r[g] - mid * sq[g] * r[8 + g];
}
#endif

// acc[g][:] = alpha[g] * acc[g][:] + sum_{t < nv} P[g][t] * v_t (dequantized rows).
template <int G, int KIND>
void value_accumulate(const ValueRows<KIND>& rows, int nv, int DV, const float* P, int ldP, const float* alpha, float* acc) {
  constexpr int W = G >= 8 ? 2 : (G >= 4 ? 4 : 8);
  const int C = DV / 16;
  for (int c0 = 0; c0 < C; c0 += W) {
    const int wn = std::min(W, C - c0);
    vf a[G][W];
    int jc[W];
    for (int w = 0; w < W; ++w) jc[w] = rows.per_lane ? 0 : (16 * (c0 + w)) / (DV / rows.n_groups);
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g)
#pragma GCC unroll 8
      for (int w = 0; w < W; ++w)
        a[g][w] = w < wn ? loadv<vf>(acc + g * DV + 16 * (c0 + w)) * alpha[g] : vf{};
    for (int t = 0; t < nv; ++t) {
      vf p[G];
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) p[g] = splat(P[g * ldP + t]);
#pragma GCC unroll 8
      for (int w = 0; w < W; ++w) {
        if (w < wn) {
          vf v = rows.load(t, c0 + w, jc[w]);
#pragma GCC unroll 8
          for (int g = 0; g < G; ++g) a[g][w] += p[g] * v;
        }
      }
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g)
#pragma GCC unroll 8
      for (int w = 0; w < W; ++w)
        if (w < wn) storev(acc + g * DV + 16 * (c0 + w), a[g][w]);
  }
}

// The folded paths accumulate codes at outlier channels too; these put back alpha * old + sum_t P v_out.
template <int G, class Rows>
void save_outliers(const Rows& rows, int DV, const float* acc, float* old) {
  for (int i = 0; i < rows.n_out; ++i)
    for (int g = 0; g < G; ++g) old[g * MAX_OUT + i] = acc[g * DV + 16 * rows.ochunk[i] + rows.olane[i]];
}

template <int G, class Rows>
void patch_outliers(const Rows& rows, int nv, int DV, const float* P, int ldP, const float* alpha, float* acc,
                    const float* old) {
  for (int i = 0; i < rows.n_out; ++i)
    for (int g = 0; g < G; ++g) {
      float o = alpha[g] * old[g * MAX_OUT + i];
      for (int t = 0; t < nv; ++t) o += P[g * ldP + t] * rows.oval[t * rows.n_out + i];
      acc[g * DV + 16 * rows.ochunk[i] + rows.olane[i]] = o;
    }
}

// Quantized values with channel groups of whole chunks: v[t][d] = s[t][j] * code[t][d] + z[t][j], so
// sum_t P[g][t] v[t][d] = sum_t (P[g][t] s[t][j]) code[t][d] + sum_t P[g][t] z[t][j]: one multiply per
// token and group (the weights w) instead of a dequantization per element, and the zero points add once
// per group. rows.scale / rows.zero are [n_groups][ldP] here (tokens contiguous, zero past nv), P is zero
// past nv. Outlier channels are recomputed from their exact values afterwards.
template <int G, int KIND>
void value_accumulate_folded(const ValueRows<KIND>& rows, int nv, int DV, const float* P, int ldP, const float* alpha,
                             float* acc, float* w) {
  constexpr int W = G >= 8 ? 2 : (G >= 4 ? 4 : 8);
  const int ng = rows.n_groups, C = DV / 16, cpg = C / ng, nt = (nv + 15) / 16;
  float* zs = w + G * ng * ldP;  // [G][ng]
  for (int g = 0; g < G; ++g)
    for (int j = 0; j < ng; ++j) {
      vf z = vf{};
      for (int i = 0; i < nt; ++i) {
        const vf p = loadv<vf>(P + g * ldP + 16 * i);
        storev(w + (g * ng + j) * ldP + 16 * i, p * loadv<vf>(rows.scale + j * ldP + 16 * i));
        if constexpr (KIND != K_FP8) z += p * loadv<vf>(rows.zero + j * ldP + 16 * i);
      }
      zs[g * ng + j] = hsum(z);
    }
  float old[8 * MAX_OUT];
  save_outliers<G>(rows, DV, acc, old);
  for (int c0 = 0; c0 < C; c0 += W) {
    const int wn = std::min(W, C - c0);
    vf a[G][W];
    const float* wk[W];  // weights of chunk c0 + k, head 0 (head g at + g * ng * ldP)
#pragma GCC unroll 8
    for (int k = 0; k < W; ++k) {
      const int j = std::min(c0 + k, C - 1) / cpg;
      wk[k] = w + j * ldP;
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g)
        a[g][k] = k < wn ? loadv<vf>(acc + g * DV + 16 * (c0 + k)) * alpha[g] + zs[g * ng + j] : vf{};
    }
    const int64_t gs = int64_t(ng) * ldP;
    for (int t = 0; t < nv; ++t) {
#pragma GCC unroll 8
      for (int k = 0; k < W; ++k) {
        if (k < wn) {
          const vf x = rows.codes(t, c0 + k);
#pragma GCC unroll 8
          for (int g = 0; g < G; ++g) a[g][k] += wk[k][g * gs + t] * x;
        }
      }
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g)
#pragma GCC unroll 8
      for (int k = 0; k < W; ++k)
        if (k < wn) storev(acc + g * DV + 16 * (c0 + k), a[g][k]);
  }
  patch_outliers<G>(rows, nv, DV, P, ldP, alpha, acc, old);
}

#if defined(__AVX512BF16__) && defined(__AVX512VBMI__)
#define MINUTIA_BF16 1
// Fast mode, INT4 values (DV a multiple of 32): as value_accumulate_folded, but the weights are rounded
// to bf16 pairs (two tokens) and the codes become bf16 128 + code (exact: high byte 0x43), so one
// vdpbf16ps does two tokens of 16 channels with no int-to-float conversion; 128 * sum w comes back out
// with the zero points. Error: each weight rounded to 8 bits (relative 2^-9).
// The INT4 / INT2 value loop of value_accumulate_bf16 for G <= 4 heads, 64 channels per pass: two rows'
// packed bytes in one register, split into code planes (INT4: nibbles, 3 instructions; INT2: the four
// 2-bit planes into two registers), and each of the 4 chunks' bf16 pairs (0x43 high byte, code low byte,
// tokens t and t+1) made by one byte permute whose masked-off bytes come from the index (0x43). Channel
// groups span an even number of chunks, so one weight broadcast serves two chunks.
template <int G, int KIND>
void value_pass64(const ValueRows<KIND>& rows, int nv, int DV, const float* alpha, float* acc, const uint32_t* wb,
                  const float* zs, int ldw, int ng, int cpg) {
  static_assert(KIND == K_INT4 || KIND == K_INT2, "packed value codes only");
  constexpr int row_bytes = KIND == K_INT4 ? 32 : 16;  // one row's bytes for 64 channels
  static const auto idx = [] {
    std::array<__m512i, 4> out;
    for (int k = 0; k < 4; ++k) {
      alignas(64) uint8_t b[64];
      for (int d = 0; d < 16; ++d)
        for (int r = 0; r < 2; ++r) {
          const int ch = 16 * k + d;  // channel within the pass
          if constexpr (KIND == K_INT4) {  // row r's byte ch / 2, nibble ch & 1
            b[4 * d + 2 * r] = uint8_t((ch & 1 ? 64 : 0) + 32 * r + ch / 2);
          } else {  // row r's byte ch / 4, bits 2 * plane
            const int plane = ch & 3;
            b[4 * d + 2 * r] = uint8_t((plane >= 2 ? 64 : 0) + 32 * (plane & 1) + 16 * r + ch / 4);
          }
          b[4 * d + 2 * r + 1] = 0x43;  // masked off: kept from the index
        }
      out[k] = _mm512_load_si512(b);
    }
    return out;
  }();
  const __mmask64 even = 0x5555555555555555ULL;
  const int64_t gs = int64_t(ng) * ldw;
  for (int c0 = 0; c0 < DV / 16; c0 += 4) {
    __m512 a[G][4];
    const uint32_t* w0 = wb + (c0 / cpg) * ldw;        // chunks c0, c0 + 1
    const uint32_t* w1 = wb + ((c0 + 2) / cpg) * ldw;  // chunks c0 + 2, c0 + 3
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k)
        a[g][k] = _mm512_fmadd_ps(_mm512_loadu_ps(acc + g * DV + 16 * (c0 + k)), _mm512_set1_ps(alpha[g]),
                                  _mm512_set1_ps(zs[g * ng + (c0 + k) / cpg]));
    const uint32_t* p0[G];  // each head's weight pairs for chunks c0, c0 + 1 and c0 + 2, c0 + 3
    const uint32_t* p1[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      p0[g] = w0 + g * gs;
      p1[g] = w1 + g * gs;
    }
    const uint8_t* base = rows.base + (row_bytes / 4) * c0;
    const int64_t stride = rows.stride;
    for (int t = 0; t < nv; t += 2) {
      const uint8_t* r0 = base + t * stride;
      const uint8_t* r1 = t + 1 < nv ? r0 + stride : r0;  // its weight is zero
      const int i = t >> 1;
      __m512i lo, hi;
      if constexpr (KIND == K_INT4) {
        const __m512i low = _mm512_set1_epi8(15);
        const __m512i x = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0))),
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1)), 1);
        lo = _mm512_and_si512(x, low);
        hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), low);
      } else {
        const __m256i three = _mm256_set1_epi8(3);
        const __m256i x = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r0))),
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(r1)), 1);
        lo = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(x, three)),
                                _mm256_and_si256(_mm256_srli_epi16(x, 2), three), 1);
        hi = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(_mm256_srli_epi16(x, 4), three)),
                                _mm256_and_si256(_mm256_srli_epi16(x, 6), three), 1);
      }
      __m512bh v[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) v[k] = (__m512bh)_mm512_mask2_permutex2var_epi8(lo, idx[k], even, hi);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        const __m512bh b0 = (__m512bh)_mm512_set1_epi32(int(p0[g][i]));
        const __m512bh b1 = (__m512bh)_mm512_set1_epi32(int(p1[g][i]));
        a[g][0] = _mm512_dpbf16_ps(a[g][0], v[0], b0);
        a[g][1] = _mm512_dpbf16_ps(a[g][1], v[1], b0);
        a[g][2] = _mm512_dpbf16_ps(a[g][2], v[2], b1);
        a[g][3] = _mm512_dpbf16_ps(a[g][3], v[3], b1);
      }
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) _mm512_storeu_ps(acc + g * DV + 16 * (c0 + k), a[g][k]);
  }
}

// INT4 values (DV % 32 == 0), or INT2 values with G <= 4, DV % 64 == 0 and groups of whole chunk pairs
// (value_pass64; the caller checks).
template <int G, int KIND>
void value_accumulate_bf16(const ValueRows<KIND>& rows, int nv, int DV, const float* P, int ldP, const float* alpha,
                           float* acc, float* w) {
  constexpr int W = G >= 8 ? 2 : (G >= 4 ? 4 : 8);  // chunks in registers (even: chunk pairs)
  const int ng = rows.n_groups, C = DV / 16, cpg = C / ng, nt = (nv + 15) / 16, ldw = (ldP + 31) / 32 * 16;
  uint32_t* wb = reinterpret_cast<uint32_t*>(w);  // [G][ng][ldw] bf16 pairs (token 2i low)
  float* zs = w + G * ng * ldP;                    // [G][ng]
  const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3F80);
  // zs[g][j] = sum_t P z - 128 sum_t w: the lane sums of all (g, j) reduced 16 at a time.
  constexpr int MAXZ = 64;
  vf zsum[MAXZ];
  const bool batched = G * ng <= MAXZ;
  for (int g = 0; g < G; ++g)
    for (int j = 0; j < ng; ++j) {
      vf z = vf{}, sw = vf{};
      for (int i = 0; i < nt; i += 2) {
        const vf p0 = loadv<vf>(P + g * ldP + 16 * i), p1 = i + 1 < nt ? loadv<vf>(P + g * ldP + 16 * i + 16) : vf{};
        const vf s0 = loadv<vf>(rows.scale + j * ldP + 16 * i), s1 = i + 1 < nt ? loadv<vf>(rows.scale + j * ldP + 16 * i + 16) : vf{};
        const __m512bh b = _mm512_cvtne2ps_pbh((__m512)(p1 * s1), (__m512)(p0 * s0));
        _mm512_storeu_si512(wb + (g * ng + j) * ldw + 8 * i, (__m512i)b);
        sw = (vf)_mm512_dpbf16_ps((__m512)sw, b, ones);
        z += p0 * loadv<vf>(rows.zero + j * ldP + 16 * i);
        if (i + 1 < nt) z += p1 * loadv<vf>(rows.zero + j * ldP + 16 * i + 16);
      }
      if (batched) zsum[g * ng + j] = z - 128.0f * sw;
      else zs[g * ng + j] = hsum(z) - 128.0f * hsum(sw);
    }
  if (batched)
    for (int i0 = 0; i0 < G * ng; i0 += 16) {
      vf part[16];
      for (int i = 0; i < 16; ++i) part[i] = i0 + i < G * ng ? zsum[i0 + i] : vf{};
      const vf r = reduce16(part);
      for (int i = 0; i < 16 && i0 + i < G * ng; ++i) zs[i0 + i] = r[i];
    }
  float old[8 * MAX_OUT];
  save_outliers<G>(rows, DV, acc, old);
  if constexpr (KIND == K_INT2) {
    if constexpr (G <= 4) value_pass64<G, K_INT2>(rows, nv, DV, alpha, acc, wb, zs, ldw, ng, cpg);
    patch_outliers<G>(rows, nv, DV, P, ldP, alpha, acc, old);
    return;
  } else {
  // z = [lo nibbles row t | row t+1 | hi nibbles row t | row t+1] (16 bytes each; lo = even channel):
  // word 2d + r of chunk k = (0x43 << 8) | code of channel 16k + d, token r.
  static const auto idx = [] {
    std::array<__m512i, 2> out;
    for (int k = 0; k < 2; ++k) {
      alignas(64) uint8_t b[64];
      for (int d = 0; d < 16; ++d)
        for (int r = 0; r < 2; ++r) {
          const int ch = 16 * k + d;
          b[4 * d + 2 * r] = uint8_t((ch & 1 ? 32 : 0) + 16 * r + ch / 2);
          b[4 * d + 2 * r + 1] = 64;  // from the 0x43 vector
        }
      out[k] = _mm512_load_si512(b);
    }
    return out;
  }();
  const __m512i k43 = _mm512_set1_epi8(0x43);
  const __m256i low = _mm256_set1_epi8(15);
  if constexpr (G <= 4) {
    if (C % 4 == 0 && cpg % 2 == 0) {  // 64 channels (4 chunks, 2 per group) per pass, all G heads
      value_pass64<G, K_INT4>(rows, nv, DV, alpha, acc, wb, zs, ldw, ng, cpg);
      patch_outliers<G>(rows, nv, DV, P, ldP, alpha, acc, old);
      return;
    }
  }
  for (int c0 = 0; c0 < C; c0 += W) {
    const int wn = std::min(W, C - c0);
    __m512 a[G][W];
    const uint32_t* wk[W];
#pragma GCC unroll 8
    for (int k = 0; k < W; ++k) {
      const int j = std::min(c0 + k, C - 1) / cpg;
      wk[k] = wb + j * ldw;
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g)
        a[g][k] = (__m512)(k < wn ? loadv<vf>(acc + g * DV + 16 * (c0 + k)) * alpha[g] + zs[g * ng + j] : vf{});
    }
    const int64_t gs = int64_t(ng) * ldw;
    for (int t = 0; t < nv; t += 2) {
      const uint8_t* r0 = rows.base + t * rows.stride;
      const uint8_t* r1 = t + 1 < nv ? r0 + rows.stride : r0;  // its weight is zero
#pragma GCC unroll 4
      for (int k = 0; k < W; k += 2) {
        if (k < wn) {
          const __m256i x = _mm256_inserti128_si256(
              _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r0 + 8 * (c0 + k)))),
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(r1 + 8 * (c0 + k))), 1);
          const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(x, low)),
                                               _mm256_and_si256(_mm256_srli_epi16(x, 4), low), 1);
          const __m512bh v0 = (__m512bh)_mm512_permutex2var_epi8(z, idx[0], k43);
          const __m512bh v1 = (__m512bh)_mm512_permutex2var_epi8(z, idx[1], k43);
#pragma GCC unroll 8
          for (int g = 0; g < G; ++g) {
            a[g][k] = _mm512_dpbf16_ps(a[g][k], v0, (__m512bh)_mm512_set1_epi32(int(wk[k][g * gs + t / 2])));
            a[g][k + 1] = _mm512_dpbf16_ps(a[g][k + 1], v1, (__m512bh)_mm512_set1_epi32(int(wk[k + 1][g * gs + t / 2])));
          }
        }
      }
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g)
#pragma GCC unroll 8
      for (int k = 0; k < W; ++k)
        if (k < wn) _mm512_storeu_ps(acc + g * DV + 16 * (c0 + k), a[g][k]);
  }
  patch_outliers<G>(rows, nv, DV, P, ldP, alpha, acc, old);
  }
}
#endif

struct Dims {
  int64_t B, H, G, DK, DV;
  float scale, softcap;
};

// Per work item scratch and running softmax state for one (batch, head, split).
struct State {
  std::vector<float> q;     // [G][DK] scaled queries
  std::vector<float> qm;    // [G][DK] scaled queries, the current source's outlier channels zeroed
  std::vector<float> qe;    // [G][DK] qm times the key scales of the current token group
  std::vector<float> sbuf, zbuf;  // [DK]
  std::vector<float> S;     // [G][ldS] logits, then probabilities
  std::vector<float> m, l, alpha, bias;  // [G]
  std::vector<float> acc;   // [G][DV]
  std::vector<float> vscale, vzero, vout;  // one block's value params as fp32
  std::vector<float> vw;    // folded value weights [nv][n_groups][G] and zero sums [G][n_groups]
  std::vector<int8_t> qi;   // fast mode: [G][Dp] int8 queries of the current token group
  std::vector<float> sq;    // [G] their scales
  struct Item {
    int si;
    int64_t e, slot;
    int nv;
  };
  std::vector<Item> work;   // the listed blocks of the current item that hold tokens
  int ldS = 0, Dp = 0;
  bool fast = false;
};

template <int G, int KIND>
void key_block(const Operand& op, const Dims& d, int64_t h, int64_t slot, int bs, int nv, int g0, State& st) {
  const int64_t H = d.H, D = d.DK;
  const int ldS = st.ldS;
  float* S = st.S.data() + g0 * ldS;
  const bool quant = KIND >= K_INT8;
  const int gsz = quant ? op.group : bs;
  constexpr int T = 16 / G;
  KeyRows<KIND> rows;
  if constexpr (KIND == K_INT4 || KIND == K_INT2) {
    constexpr int per = codes_per_byte(KIND);
    rows.base = op.data + ((slot * (bs / per)) * H + h) * D;
    rows.stride = H * D;
  } else {
    const int elt = KIND == K_F32 ? 4 : (KIND == K_BF16 || KIND == K_F16 ? 2 : 1);
    rows.base = op.data + ((slot * bs) * H + h) * D * elt;
    rows.stride = H * D * elt;
  }
  const float* qm = st.qm.data() + g0 * D;
  for (int t0 = 0; t0 < nv; t0 += gsz) {
    const float* qe = qm;
    float* bias = st.bias.data() + g0;
#ifdef MINUTIA_VNNI
    if constexpr (KIND == K_INT8 || KIND == K_INT4 || KIND == K_INT2) {
      constexpr int step = codes_per_byte(KIND);  // tokens per packed row
      // Tiles of T tokens inside the group, of whole packed rows (or 16-row transposed tiles).
      if (st.fast && gsz % T == 0 && (T % step == 0 || gsz % (16 * step) == 0)) {
        const int64_t prow = ((slot * (bs / gsz) + t0 / gsz) * H + h) * D;
        float* sv = st.sbuf.data();
        float* zv = st.zbuf.data();
        for (int c = 0; c < D / 16; ++c) {
          storev(sv + 16 * c, params16(op.scale, op.pdtype, prow + 16 * c));
          storev(zv + 16 * c, params16(op.zero, op.pdtype, prow + 16 * c));
        }
        int8_t* qi = st.qi.data() + g0 * st.Dp;
        // Codes are 0 .. 2^bits - 1: mid-range 127.5 (INT8), 7.5 (INT4), 1.5 (INT2).
        constexpr float mid = KIND == K_INT8 ? 127.5f : (KIND == K_INT4 ? 7.5f : 1.5f);
        prep_query_i8<G>(qm, sv, zv, int(D), st.Dp, mid, st.qe.data() + g0 * D, qi, st.sq.data() + g0, bias);
        const int t_end = std::min(t0 + gsz, nv);
        if (gsz % (16 * step) == 0) {  // whole 16-row tiles inside the group: tokens in lanes
          for (int r = t0 / step; r * step < t_end; r += 16)
            key_dots_i8_t<G, KIND>(rows.base, rows.stride, r, int(D), st.Dp, qi, st.sq.data() + g0, bias, S, ldS);
        } else if constexpr (T % step == 0) {
          const int t1 = std::min(t0 + gsz, (t_end + T - 1) / T * T);
          key_dots_i8<G, T, KIND>(rows.base, rows.stride, t0, t1, int(D), st.Dp, qi, st.sq.data() + g0, bias, S, ldS);
        }
        continue;
      }
    }
#endif
    if constexpr (KIND >= K_INT8) {
      // Fold the per-channel scale of this token group into the queries; the zero point is a bias.
      const int64_t prow = ((slot * (bs / gsz) + t0 / gsz) * H + h) * D;
      float* qe_w = st.qe.data() + g0 * D;
      for (int c = 0; c < D / 16; ++c) {
        vf s = params16(op.scale, op.pdtype, prow + 16 * c);
        for (int g = 0; g < G; ++g) storev(qe_w + g * D + 16 * c, loadv<vf>(qm + g * D + 16 * c) * s);
      }
      for (int g = 0; g < G; ++g) bias[g] = 0.0f;
      if (KIND != K_FP8) {
        vf b[G];
        for (int g = 0; g < G; ++g) b[g] = vf{};
        for (int c = 0; c < D / 16; ++c) {
          vf z = params16(op.zero, op.pdtype, prow + 16 * c);
          for (int g = 0; g < G; ++g) b[g] += loadv<vf>(qm + g * D + 16 * c) * z;
        }
        for (int g = 0; g < G; ++g) bias[g] = hsum(b[g]);
      }
      qe = qe_w;
    }
    const int t_end = std::min(t0 + gsz, nv);
#ifdef MINUTIA_VNNI
    if constexpr (KIND == K_INT8 || KIND == K_INT4) {
      if (st.fast && gsz % T == 0) {
        int8_t* qi = st.qi.data() + g0 * st.Dp;
        quantize_query<G>(qe, int(D), st.Dp, KIND == K_INT8 ? 127.5f : 7.5f, qi, st.sq.data() + g0, bias);
        constexpr int step = KIND == K_INT4 ? 2 : 1;
        if (gsz % (16 * step) == 0) {  // whole 16-row tiles inside the group: tokens in lanes
          for (int r = t0 / step; r * step < t_end; r += 16)
            key_dots_i8_t<G, KIND>(rows.base, rows.stride, r, int(D), st.Dp, qi, st.sq.data() + g0, bias, S, ldS);
          continue;
        }
        const int t1 = std::min(t0 + gsz, (t_end + T - 1) / T * T);
        key_dots_i8<G, T, KIND>(rows.base, rows.stride, t0, t1, int(D), st.Dp, qi, st.sq.data() + g0, bias, S, ldS);
        continue;
      }
    }
#endif
    if (gsz % T == 0) {  // tiles of T tokens never straddle two token groups
      const int t1 = std::min(t0 + gsz, (t_end + T - 1) / T * T);
      key_dots<G, T, KIND>(rows, t0, t1, D, qe, S, ldS);
    } else {
      key_dots<G, 1, KIND>(rows, t0, t_end, D, qe, S, ldS);
    }
    if constexpr (KIND >= K_INT8) {
      for (int g = 0; g < G; ++g)
        for (int t = t0; t < t_end; ++t) S[g * ldS + t] += bias[g];
    }
  }
  if (op.n_out) {  // exact outlier channels: q_c * k_c, their code part was zeroed in qm
    const int64_t orow = (slot * bs * H + h) * op.n_out;
    const float* q = st.q.data() + g0 * D;
    for (int t = 0; t < nv; ++t)
      for (int j = 0; j < op.n_out; ++j) {
        const float ov = param_at(op.oval, op.odtype, orow + t * H * op.n_out + j);
        const int64_t c = op.oidx[h * op.n_out + j];
        for (int g = 0; g < G; ++g) S[g * ldS + t] += q[g * D + c] * ov;
      }
  }
}

// Convert n rows of `width` params (row stride `stride`) to fp32 [n][width].
template <int DTYPE>
void params_rows(const void* p, int64_t first, int64_t stride, int n, int width, float* out) {
  for (int t = 0; t < n; ++t)
    for (int j = 0; j < width; ++j) out[t * width + j] = param_at(p, DTYPE, first + t * stride + j);
}

// The same, transposed: out[j][t] with row stride ld, zero-filled for t in [n, ceil16(n)).
template <int DTYPE>
void params_cols(const void* p, int64_t first, int64_t stride, int n, int width, int ld, float* out) {
#if defined(__F16C__)
  if (DTYPE == P_F16 && width % 4 == 0) {  // 4 conversions per instruction
    const uint16_t* h = static_cast<const uint16_t*>(p) + first;
    for (int t = 0; t < n; ++t)
      for (int j = 0; j < width; j += 4) {
        const __m128 x = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(h + t * stride + j)));
        out[j * ld + t] = _mm_cvtss_f32(x);
        out[(j + 1) * ld + t] = _mm_cvtss_f32(_mm_shuffle_ps(x, x, 1));
        out[(j + 2) * ld + t] = _mm_cvtss_f32(_mm_shuffle_ps(x, x, 2));
        out[(j + 3) * ld + t] = _mm_cvtss_f32(_mm_shuffle_ps(x, x, 3));
      }
  } else
#endif
  for (int t = 0; t < n; ++t)
    for (int j = 0; j < width; ++j) out[j * ld + t] = param_at(p, DTYPE, first + t * stride + j);
  for (int j = 0; j < width; ++j)
    for (int t = n; t < (n + 15) / 16 * 16; ++t) out[j * ld + t] = 0.0f;
}

#if defined(__AVX512BW__)
// params_cols for 16-bit params and width % 4 == 0: per 16 rows, each 8-byte run of 4 params is
// gathered (two 8-lane gathers, rows past n masked to zero), and one word permute per param picks its
// 16 rows, converted to fp32 in one instruction.
template <int DTYPE>
void params_cols16(const void* p, int64_t first, int64_t stride, int n, int width, int ld, float* out) {
  const char* base = static_cast<const char*>(p) + 2 * first;
  const __m512i rows = _mm512_mullo_epi64(_mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi64(2 * stride));
  static const auto pick = [] {
    std::array<__m512i, 4> out;
    for (int j = 0; j < 4; ++j) {
      alignas(64) uint16_t ix[32];
      for (int t = 0; t < 32; ++t) ix[t] = uint16_t(4 * (t % 16) + j);  // row t (of 16): word 4t + j of (a, b)
      out[j] = _mm512_load_si512(ix);
    }
    return out;
  }();
  for (int t0 = 0; t0 < n; t0 += 16) {
    const int left = n - t0;
    const __mmask8 m0 = left >= 8 ? 0xFF : __mmask8((1u << left) - 1);
    const __mmask8 m1 = left >= 16 ? 0xFF : (left <= 8 ? 0 : __mmask8((1u << (left - 8)) - 1));
    const char* b0 = base + 2 * int64_t(t0) * stride;
    const char* b1 = b0 + 16 * stride;
    for (int q = 0; q < width; q += 4) {
      __m512i a, b;
      if (stride == 4) {  // rows of 4 params back to back (head-major values): the runs are one load
        a = _mm512_maskz_loadu_epi64(m0, b0);
        b = _mm512_maskz_loadu_epi64(m1, b1);
      } else {
        a = _mm512_mask_i64gather_epi64(_mm512_setzero_si512(), m0, rows, b0 + 2 * q, 1);
        b = m1 ? _mm512_mask_i64gather_epi64(_mm512_setzero_si512(), m1, rows, b1 + 2 * q, 1) : _mm512_setzero_si512();
      }
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const __m256i h = _mm512_castsi512_si256(_mm512_permutex2var_epi16(a, pick[j], b));
        __m512 f;
        if constexpr (DTYPE == P_F16) f = _mm512_cvtph_ps(h);
        else f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        _mm512_storeu_ps(out + (q + j) * ld + t0, f);
      }
    }
  }
}
#endif

void params_to_float_t(const void* p, int dtype, int64_t first, int64_t stride, int n, int width, int ld, float* out) {
#if defined(__AVX512BW__)
  if (width % 4 == 0 && n > 0) {
    if (dtype == P_F16) return params_cols16<P_F16>(p, first, stride, n, width, ld, out);
    if (dtype == P_BF16) return params_cols16<P_BF16>(p, first, stride, n, width, ld, out);
  }
#endif
  switch (dtype) {
    case P_BF16: return params_cols<P_BF16>(p, first, stride, n, width, ld, out);
    case P_F16: return params_cols<P_F16>(p, first, stride, n, width, ld, out);
    default: return params_cols<P_F32>(p, first, stride, n, width, ld, out);
  }
}

void params_to_float(const void* p, int dtype, int64_t first, int64_t stride, int n, int width, float* out) {
  switch (dtype) {
    case P_BF16: return params_rows<P_BF16>(p, first, stride, n, width, out);
    case P_F16: return params_rows<P_F16>(p, first, stride, n, width, out);
    default: return params_rows<P_F32>(p, first, stride, n, width, out);
  }
}

inline int elt_size(int kind) { return kind == K_F32 ? 4 : (kind == K_BF16 || kind == K_F16 ? 2 : 1); }
inline int param_size(int dtype) { return dtype == P_F32 ? 4 : 2; }

// Touch n rows of `bytes` bytes each (row stride `stride` bytes), so they are on their way to the
// cache while the previous block is computed: a block's rows are scattered (one head's slice of
// each token row), too short a run for the hardware prefetcher to pick up.
inline void prefetch_rows(const void* base, int64_t stride, int n, int64_t bytes) {
  const char* p = static_cast<const char*>(base);
  for (int r = 0; r < n; ++r)
    for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + r * stride + off, 0, 2);
}

void prefetch_block(const Operand& k, const Operand& v, int64_t H, int64_t DK, int64_t DV, int64_t h, int64_t slot,
                    int bs, int nv) {
  if (k.kind == K_INT4 || k.kind == K_INT2) {
    const int per = codes_per_byte(k.kind);
    prefetch_rows(k.data + ((slot * (bs / per)) * H + h) * DK, H * DK, (nv + per - 1) / per, DK);
  } else {
    const int e = elt_size(k.kind);
    prefetch_rows(k.data + ((slot * bs) * H + h) * DK * e, H * DK * e, nv, DK * e);
  }
  if (k.kind >= K_INT8) {
    const int ps = param_size(k.pdtype), ng = (nv + k.group - 1) / k.group;
    const int64_t first = ((slot * (bs / k.group)) * H + h) * DK * ps;
    prefetch_rows(static_cast<const char*>(k.scale) + first, H * DK * ps, ng, DK * ps);
    if (k.zero) prefetch_rows(static_cast<const char*>(k.zero) + first, H * DK * ps, ng, DK * ps);
  }
  if (v.kind == K_INT4 || v.kind == K_INT2) {
    const int per = codes_per_byte(v.kind);
    prefetch_rows(v.data + ((slot * bs) * H + h) * (DV / per), H * (DV / per), nv, DV / per);
  } else {
    const int e = elt_size(v.kind);
    prefetch_rows(v.data + ((slot * bs) * H + h) * DV * e, H * DV * e, nv, DV * e);
  }
  if (v.kind >= K_INT8) {
    const int ps = param_size(v.pdtype);
    const int64_t ng = DV / v.group, first = (slot * v.ps_page + h * v.ps_head) * ps;
    const bool run = v.ps_tok == ng;  // head-major: the block's params are one run
    const int64_t stride = run ? 0 : v.ps_tok * ps, bytes = run ? nv * ng * ps : ng * ps;
    prefetch_rows(static_cast<const char*>(v.scale) + first, stride, run ? 1 : nv, bytes);
    if (v.zero) prefetch_rows(static_cast<const char*>(v.zero) + first, stride, run ? 1 : nv, bytes);
  }
}

template <int G, int KIND>
void value_block(const Operand& op, const Dims& d, int64_t h, int64_t slot, int bs, int nv, int g0, State& st,
                 const int* ochunk, const int* olane) {
  const int64_t H = d.H, D = d.DV;
  ValueRows<KIND> rows{};
  if constexpr (KIND == K_INT4 || KIND == K_INT2) {
    constexpr int per = codes_per_byte(KIND);
    rows.base = op.data + ((slot * bs) * H + h) * (D / per);
    rows.stride = H * (D / per);
  } else {
    const int elt = KIND == K_F32 ? 4 : (KIND == K_BF16 || KIND == K_F16 ? 2 : 1);
    rows.base = op.data + ((slot * bs) * H + h) * D * elt;
    rows.stride = H * D * elt;
  }
  rows.n_groups = 1;
  if constexpr (KIND >= K_INT8) {
    if (g0 == 0) {  // once per block: this block's params as fp32
      const int ng = int(D / op.group);
      const int64_t first = slot * op.ps_page + h * op.ps_head, ts = op.ps_tok;
      if (op.group % 16 == 0) {  // folded path: [ng][ldS]
        params_to_float_t(op.scale, op.pdtype, first, ts, nv, ng, st.ldS, st.vscale.data());
        if (op.zero) params_to_float_t(op.zero, op.pdtype, first, ts, nv, ng, st.ldS, st.vzero.data());
      } else {
        params_to_float(op.scale, op.pdtype, first, ts, nv, ng, st.vscale.data());
        if (op.zero) params_to_float(op.zero, op.pdtype, first, ts, nv, ng, st.vzero.data());
      }
      if (op.group % 16) {  // groups narrower than a chunk: expand to one param per channel
        for (int t = nv - 1; t >= 0; --t)
          for (int64_t c = D - 1; c >= 0; --c) {
            st.vscale[t * D + c] = st.vscale[t * ng + c / op.group];
            if (op.zero) st.vzero[t * D + c] = st.vzero[t * ng + c / op.group];
          }
      }
      if (op.n_out)
        params_to_float(op.oval, op.odtype, ((slot * bs) * H + h) * op.n_out, H * op.n_out, nv, op.n_out, st.vout.data());
    }
    rows.per_lane = op.group % 16 != 0;
    rows.n_groups = rows.per_lane ? int(D) : int(D / op.group);
    rows.scale = st.vscale.data();
    rows.zero = st.vzero.data();
    rows.n_out = op.n_out;
    rows.oval = st.vout.data();
    rows.ochunk = ochunk;
    rows.olane = olane;
    rows.out_chunks = 0;
    for (int i = 0; i < op.n_out; ++i) rows.out_chunks |= uint64_t(1) << ochunk[i];
  }
  if constexpr (KIND >= K_INT8) {
    if (!rows.per_lane) {
#ifdef MINUTIA_BF16
      if constexpr (KIND == K_INT4) {
        if (st.fast && D % 32 == 0) {
          value_accumulate_bf16<G, KIND>(rows, nv, D, st.S.data() + g0 * st.ldS, st.ldS, st.alpha.data() + g0,
                                         st.acc.data() + g0 * D, st.vw.data());
          return;
        }
      }
      if constexpr (KIND == K_INT2 && G <= 4) {  // 64 channels per pass, groups of whole chunk pairs
        if (st.fast && D % 64 == 0 && op.group % 32 == 0) {
          value_accumulate_bf16<G, KIND>(rows, nv, D, st.S.data() + g0 * st.ldS, st.ldS, st.alpha.data() + g0,
                                         st.acc.data() + g0 * D, st.vw.data());
          return;
        }
      }
#endif
      value_accumulate_folded<G, KIND>(rows, nv, D, st.S.data() + g0 * st.ldS, st.ldS, st.alpha.data() + g0,
                                       st.acc.data() + g0 * D, st.vw.data());
      return;
    }
  }
  value_accumulate<G, KIND>(rows, nv, D, st.S.data() + g0 * st.ldS, st.ldS, st.alpha.data() + g0,
                            st.acc.data() + g0 * D);
}

using KeyFn = void (*)(const Operand&, const Dims&, int64_t, int64_t, int, int, int, State&);
using ValueFn = void (*)(const Operand&, const Dims&, int64_t, int64_t, int, int, int, State&, const int*, const int*);

// The instance of Op<G, KIND>::fn for a head chunk size and a storage kind.
template <int G, int KIND>
struct KeyOp {
  static constexpr KeyFn fn = key_block<G, KIND>;
};
template <int G, int KIND>
struct ValueOp {
  static constexpr ValueFn fn = value_block<G, KIND>;
};

template <template <int, int> class Op, int G>
auto pick_kind(int kind) {
  switch (kind) {
    case K_F32: return Op<G, K_F32>::fn;
    case K_BF16: return Op<G, K_BF16>::fn;
    case K_F16: return Op<G, K_F16>::fn;
    case K_INT8: return Op<G, K_INT8>::fn;
    case K_INT4: return Op<G, K_INT4>::fn;
    case K_FP8: return Op<G, K_FP8>::fn;
    case K_INT2: return Op<G, K_INT2>::fn;
  }
  throw std::invalid_argument("unknown storage kind");
}

template <template <int, int> class Op>
auto pick(int g, int kind) {
  switch (g) {
    case 1: return pick_kind<Op, 1>(kind);
    case 2: return pick_kind<Op, 2>(kind);
    case 4: return pick_kind<Op, 4>(kind);
    default: return pick_kind<Op, 8>(kind);
  }
}

// The query heads of a group in chunks of 8, 4, 2, 1 (each chunk one template instance).
std::vector<std::pair<int, int>> head_chunks(int G) {
  std::vector<std::pair<int, int>> out;
  int g0 = 0;
  for (int size : {8, 4, 2, 1})
    while (G - g0 >= size) {
      out.emplace_back(g0, size);
      g0 += size;
    }
  return out;
}

Operand operand_from(const std::vector<int64_t>& v, size_t at) {
  Operand op;
  op.kind = int(v[at]);
  op.data = reinterpret_cast<const uint8_t*>(v[at + 1]);
  op.scale = reinterpret_cast<const void*>(v[at + 2]);
  op.zero = reinterpret_cast<const void*>(v[at + 3]);
  op.pdtype = int(v[at + 4]);
  op.group = int(v[at + 5]);
  op.oidx = reinterpret_cast<const int64_t*>(v[at + 6]);
  op.oval = reinterpret_cast<const void*>(v[at + 7]);
  op.odtype = int(v[at + 8]);
  op.n_out = int(v[at + 9]);
  op.ps_page = v[at + 10];
  op.ps_tok = v[at + 11];
  op.ps_head = v[at + 12];
  return op;
}

// Softcap, mask, online-softmax update for one block; leaves probabilities in S. Heads go four at a
// time, each phase for all four before the next, so their max / exp / sum chains overlap.
void softmax_block(const Dims& d, int nv, State& st, float* bm, float* bl, int64_t mstride) {
  const int ldS = st.ldS;
  const int G = int(d.G);
  for (int g0 = 0; g0 < G; g0 += 4) {
    const int n = std::min(4, G - g0);
    float m_new[4], alpha[4];
    vf mx[4], sum[4];
    for (int k = 0; k < n; ++k) {
      float* s = st.S.data() + (g0 + k) * ldS;
      mx[k] = splat(NEG_INF);
      for (int t = 0; t < nv; t += 16) {
        vf x = loadv<vf>(s + t);
        if (d.softcap > 0) {  // cap * tanh(x / cap), tanh(y) = 1 - 2 / (exp(2y) + 1)
          vf e = vexp(x * (2.0f / d.softcap));
          x = d.softcap * (1.0f - 2.0f / (e + 1.0f));
        }
        x = lane_index() + float(t) < float(nv) ? x : splat(NEG_INF);
        storev(s + t, x);
        mx[k] = vmax(mx[k], x);
      }
    }
    for (int k = 0; k < n; ++k) {
      const float m_old = st.m[g0 + k];
      m_new[k] = std::max(m_old, hmax(mx[k]));
      alpha[k] = m_old == NEG_INF ? 0.0f : std::exp(m_old - m_new[k]);
    }
    for (int k = 0; k < n; ++k) {
      float* s = st.S.data() + (g0 + k) * ldS;
      sum[k] = vf{};
      for (int t = 0; t < nv; t += 16) {
        vf p = vexp(loadv<vf>(s + t) - m_new[k]);
        p = lane_index() + float(t) < float(nv) ? p : vf{};
        storev(s + t, p);
        sum[k] += p;
      }
    }
    for (int k = 0; k < n; ++k) {
      const int g = g0 + k;
      const float block_sum = hsum(sum[k]);
      st.l[g] = st.l[g] * alpha[k] + block_sum;
      st.m[g] = m_new[k];
      st.alpha[g] = alpha[k];
      if (bm) {
        bm[g * mstride] = m_new[k];
        bl[g * mstride] = block_sum;
      }
    }
  }
}

// Returns nothing: writes out [B, H, G, DV] (normalised), lse [B, H, G] and, when mass_ptr is set,
// the per-block mass [B, H, G, M_total] normalised within this call's softmax ([B, H, M_total], summed
// over the G heads, when mass_summed). q is [B, H * G, DK] fp32 (q_kind 0), bf16 (1) or fp16 (2).
void decode(int64_t q_ptr, int64_t out_ptr, int64_t lse_ptr, int64_t mass_ptr, int64_t B, int64_t H, int64_t G,
            int64_t DK, int64_t DV, double scale, double softcap, int64_t n_splits, int64_t n_threads,
            const std::vector<std::vector<int64_t>>& source_args, bool fast, int64_t q_kind, bool mass_summed) {
  if (q_kind < 0 || q_kind > 2) throw std::invalid_argument("queries must be fp32, bf16 or fp16");
  if (DK % 16 || DV % 16) throw std::invalid_argument("head dims must be multiples of 16");
  const Dims dims{B, H, G, DK, DV, float(scale), float(softcap)};
  std::vector<Source> sources;
  std::vector<int64_t> col_start{0};
  int max_bs = 16;
  for (const auto& a : source_args) {
    if (a.size() != 30) throw std::invalid_argument("bad source description");
    Source s;
    s.table = reinterpret_cast<const int64_t*>(a[0]);
    s.seq = reinterpret_cast<const int64_t*>(a[1]);
    s.width = a[2];
    s.bs = int(a[3]);
    s.k = operand_from(a, 4);
    s.v = operand_from(a, 17);
    max_bs = std::max(max_bs, s.bs);
    sources.push_back(s);
    col_start.push_back(col_start.back() + s.width);
  }
  const int64_t total = col_start.back();
  const void* q_in = reinterpret_cast<const void*>(q_ptr);
  float* out = reinterpret_cast<float*>(out_ptr);
  float* lse = reinterpret_cast<float*>(lse_ptr);
  float* mass = reinterpret_cast<float*>(mass_ptr);
  const auto chunks = head_chunks(int(G));

  // Kernels per (source, head chunk).
  std::vector<std::vector<KeyFn>> kfns(sources.size());
  std::vector<std::vector<ValueFn>> vfns(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    for (auto [g0, gn] : chunks) {
      kfns[i].push_back(pick<KeyOp>(gn, sources[i].k.kind));
      vfns[i].push_back(pick<ValueOp>(gn, sources[i].v.kind));
    }
  }

  n_splits = std::max<int64_t>(1, std::min<int64_t>(n_splits, std::max<int64_t>(total, 1)));
  const int64_t per_split = (std::max<int64_t>(total, 1) + n_splits - 1) / n_splits;
  const int64_t n_items = B * H * n_splits;
  std::vector<float> part_m(n_items * G), part_l(n_items * G), part_acc(n_items * G * DV);
  // Per block running max and sum (mass = sum * exp(max - lse)), [B, H, G, total].
  std::vector<float> blk_m, blk_l;
  if (mass) {
    blk_m.assign(B * H * G * total, NEG_INF);
    blk_l.assign(B * H * G * total, 0.0f);
  }

#pragma omp parallel for schedule(dynamic, 1) num_threads(int(n_threads)) if (n_threads > 1 && n_items > 1)
  for (int64_t item = 0; item < n_items; ++item) {
    const int64_t bh = item / n_splits, split = item % n_splits;
    const int64_t h = bh % H;
    thread_local State st;  // scratch kept across calls: no allocation (and page faults) per call
    st.ldS = (max_bs + 15) / 16 * 16;
    st.q.resize(G * DK);
    st.qm.resize(G * DK);
    st.qe.resize(G * DK);
    st.sbuf.resize(DK);
    st.zbuf.resize(DK);
    st.S.assign(G * st.ldS, 0.0f);
    st.m.assign(G, NEG_INF);
    st.l.assign(G, 0.0f);
    st.alpha.assign(G, 1.0f);
    st.bias.assign(G, 0.0f);
    st.acc.assign(G * DV, 0.0f);
    st.vscale.resize(st.ldS * DV);
    st.vzero.resize(st.ldS * DV);
    st.vout.resize(max_bs * MAX_OUT);
    st.vw.resize((st.ldS + 1) * (DV / 16) * G);
    st.Dp = int((DK + 63) / 64 * 64);
    st.qi.resize(G * st.Dp);
    st.sq.resize(G);
    st.fast = fast;
    for (int64_t i = 0; i < G * DK; ++i) st.q[i] = param_at(q_in, int(q_kind), bh * G * DK + i) * dims.scale;
    const int64_t e0 = split * per_split, e1 = std::min(total, e0 + per_split);
    int current = -1;
    // The listed blocks of this item that hold tokens: (source, column, slot, tokens).
    auto& work = st.work;
    work.clear();
    for (int64_t e = e0, si = 0; e < e1; ++e) {
      while (col_start[si + 1] <= e) ++si;
      const Source& src = sources[si];
      const int64_t m = e - col_start[si];
      const int64_t slot = src.table[bh * src.width + m];
      const int64_t nv64 = std::clamp<int64_t>(src.seq[bh] - m * src.bs, 0, src.bs);
      if (slot >= 0 && nv64 > 0) work.push_back({int(si), e, slot, int(nv64)});
    }
    const int n_work = int(work.size());
    for (int i = 0; i < std::min(n_work, PREFETCH_AHEAD); ++i) {
      const Source& p = sources[work[i].si];
      prefetch_block(p.k, p.v, H, DK, DV, h, work[i].slot, p.bs, work[i].nv);
    }
    for (int wi = 0; wi < n_work; ++wi) {
      const int si = work[wi].si;
      const Source& src = sources[si];
      const int64_t e = work[wi].e, slot = work[wi].slot;
      const int nv = work[wi].nv;
      if (wi + PREFETCH_AHEAD < n_work) {  // the block PREFETCH_AHEAD ahead is on its way meanwhile
        const auto& f = work[wi + PREFETCH_AHEAD];
        const Source& p = sources[f.si];
        prefetch_block(p.k, p.v, H, DK, DV, h, f.slot, p.bs, f.nv);
      }
      if (si != current) {  // the queries with this source's key outlier channels zeroed
        current = si;
        std::copy(st.q.begin(), st.q.end(), st.qm.begin());
        for (int j = 0; j < src.k.n_out; ++j) {
          const int64_t c = src.k.oidx[h * src.k.n_out + j];
          for (int64_t g = 0; g < G; ++g) st.qm[g * DK + c] = 0.0f;
        }
      }
      // Outlier channel positions of this head's values.
      int oc[MAX_OUT], ol[MAX_OUT];
      const int n_vo = std::min(src.v.n_out, MAX_OUT);
      for (int j = 0; j < n_vo; ++j) {
        const int64_t c = src.v.oidx[h * src.v.n_out + j];
        oc[j] = int(c / 16);
        ol[j] = int(c % 16);
      }
      for (size_t ci = 0; ci < chunks.size(); ++ci)
        kfns[si][ci](src.k, dims, h, slot, src.bs, nv, chunks[ci].first, st);
      float* bm = mass ? blk_m.data() + bh * G * total + e : nullptr;
      float* bl = mass ? blk_l.data() + bh * G * total + e : nullptr;
      softmax_block(dims, nv, st, bm, bl, total);
      for (size_t ci = 0; ci < chunks.size(); ++ci)
        vfns[si][ci](src.v, dims, h, slot, src.bs, nv, chunks[ci].first, st, oc, ol);
    }
    // acc is up to date: each block's alpha was applied when its values were accumulated.
    std::copy(st.m.begin(), st.m.end(), part_m.begin() + item * G);
    std::copy(st.l.begin(), st.l.end(), part_l.begin() + item * G);
    std::copy(st.acc.begin(), st.acc.end(), part_acc.begin() + item * G * DV);
  }

  // Merge the splits of each (batch, head) by log-sum-exp; normalise.
  for (int64_t bh = 0; bh < B * H; ++bh) {
    for (int64_t g = 0; g < G; ++g) {
      float mx = NEG_INF;
      for (int64_t s = 0; s < n_splits; ++s) mx = std::max(mx, part_m[(bh * n_splits + s) * G + g]);
      float* o = out + (bh * G + g) * DV;
      std::fill(o, o + DV, 0.0f);
      float denom = 0.0f;
      if (mx != NEG_INF) {
        for (int64_t s = 0; s < n_splits; ++s) {
          const int64_t item = bh * n_splits + s;
          const float pm = part_m[item * G + g];
          if (pm == NEG_INF) continue;
          const float w = std::exp(pm - mx);
          denom += part_l[item * G + g] * w;
          const float* a = part_acc.data() + (item * G + g) * DV;
          for (int64_t i = 0; i < DV; ++i) o[i] += a[i] * w;
        }
      }
      if (denom > 0) {
        const float inv = 1.0f / denom;
        for (int64_t i = 0; i < DV; ++i) o[i] *= inv;
        lse[bh * G + g] = mx + std::log(denom);
      } else {
        std::fill(o, o + DV, 0.0f);
        lse[bh * G + g] = NEG_INF;
      }
      if (mass) {
        const float total_lse = lse[bh * G + g];
        const float* bm = blk_m.data() + (bh * G + g) * total;
        const float* bl = blk_l.data() + (bh * G + g) * total;
        if (mass_summed) {
          float* ms = mass + bh * total;
          if (g == 0) std::fill(ms, ms + total, 0.0f);
          for (int64_t e = 0; e < total; ++e)
            ms[e] += (total_lse == NEG_INF || bm[e] == NEG_INF) ? 0.0f : bl[e] * std::exp(bm[e] - total_lse);
        } else {
          float* ms = mass + (bh * G + g) * total;
          for (int64_t e = 0; e < total; ++e)
            ms[e] = (total_lse == NEG_INF || bm[e] == NEG_INF) ? 0.0f : bl[e] * std::exp(bm[e] - total_lse);
        }
      }
    }
  }
}

// Quest scores of 16 / R listed blocks at a time for R query rows (R in 1, 2, 4, 8, 16; D % 16 == 0): the
// 16 (block, row) dot products reduced together, the bounds read straight from the pool (rows of
// upcoming blocks prefetched: their slots are random). Non-finite sums (infinite bounds) are redone
// elementwise by the caller. sc[m] = max over rows; padding columns get -inf.
template <int R>
void quest_blocks(const float* qp, const float* qn, const void* lo_p, const void* hi_p, int b_kind,
                  const int64_t* row, int64_t H, int64_t h, int64_t D, int64_t M, float* sc, uint8_t* redo) {
  constexpr int NB = 16 / R;
  constexpr int AHEAD = 2 * NB;
  const int pb = param_size(b_kind);
  for (int64_t m0 = 0; m0 < M; m0 += NB) {
    for (int64_t f = m0 + AHEAD; f < std::min(M, m0 + AHEAD + NB); ++f)
      if (row[f] >= 0) {
        const int64_t first = (row[f] * H + h) * D * pb;
        for (int64_t off = 0; off < D * pb; off += 64) {
          __builtin_prefetch(static_cast<const char*>(lo_p) + first + off, 0, 3);
          __builtin_prefetch(static_cast<const char*>(hi_p) + first + off, 0, 3);
        }
      }
    int64_t firsts[NB];
    for (int b = 0; b < NB; ++b) {
      const int64_t m = m0 + b;
      firsts[b] = (m < M && row[m] >= 0) ? (row[m] * H + h) * D : -1;
    }
    vf acc[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = vf{};
    for (int64_t c = 0; c < D; c += 16) {
      vf qpv[R], qnv[R];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        qpv[r] = loadv<vf>(qp + r * D + c);
        qnv[r] = loadv<vf>(qn + r * D + c);
      }
#pragma GCC unroll 16
      for (int b = 0; b < NB; ++b) {
        if (firsts[b] < 0) continue;
        const vf lo = params16(lo_p, b_kind, firsts[b] + c), hi = params16(hi_p, b_kind, firsts[b] + c);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) acc[b * R + r] += qpv[r] * hi + qnv[r] * lo;
      }
    }
    const vf sums = reduce16(acc);
    for (int b = 0; b < NB && m0 + b < M; ++b) {
      if (firsts[b] < 0) {
        sc[m0 + b] = NEG_INF;
        continue;
      }
      float best = NEG_INF;
      bool finite = true;
      for (int r = 0; r < R; ++r) {
        const float v = sums[b * R + r];
        finite = finite && std::isfinite(v);
        best = std::max(best, v);
      }
      sc[m0 + b] = best;
      redo[m0 + b] = !finite;
    }
  }
}

// Quest bounds and top-k selection (kernels/reference.py quest_scores + select_top_k_blocks) fused.
// q [B, Hkv * G, Q, D] (q_kind 0/1/2 = fp32/bf16/fp16), kmin/kmax [P, Hkv, D] (b_kind likewise), the
// table [B, Hkv, M] int64 (-1 = padding), always [B, Hkv, M] bool or null. Writes the scores
// [B, Hkv, M] (when scores_ptr is set): max over the group's heads and queries of
// sum_d max(q_d kmin_d, q_d kmax_d), -inf on padding; and, when k >= 0, the kept blocks [B, Hkv, k]
// (k <= M): the k best (always-kept blocks first, ties to the lower column), in column order, -1 for
// picks that are padding.
void quest_select(int64_t q_ptr, int64_t q_kind, int64_t kmin_ptr, int64_t kmax_ptr, int64_t b_kind, int64_t table_ptr,
                  int64_t always_ptr, int64_t scores_ptr, int64_t out_ptr, int64_t B, int64_t H, int64_t G, int64_t Q,
                  int64_t D, int64_t M, int64_t k, int64_t n_threads) {
  if (q_kind < 0 || q_kind > 2 || b_kind < 0 || b_kind > 2) throw std::invalid_argument("bad dtype code");
  if (k > M) throw std::invalid_argument("k > M");
  const void* qv = reinterpret_cast<const void*>(q_ptr);
  const void* lo_p = reinterpret_cast<const void*>(kmin_ptr);
  const void* hi_p = reinterpret_cast<const void*>(kmax_ptr);
  const int64_t* table = reinterpret_cast<const int64_t*>(table_ptr);
  const uint8_t* always = reinterpret_cast<const uint8_t*>(always_ptr);
  float* scores_out = reinterpret_cast<float*>(scores_ptr);
  int64_t* out = reinterpret_cast<int64_t*>(out_ptr);
  const int64_t R = G * Q, Dp = (D + 15) / 16 * 16;
#pragma omp parallel for schedule(static) num_threads(int(n_threads)) if (n_threads > 1 && B * H > 1)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t h = bh % H;
    thread_local std::vector<float> qp, qn, qf, lo, hi, sc;
    thread_local std::vector<int64_t> order;
    qp.assign(R * Dp, 0.0f);
    qn.assign(R * Dp, 0.0f);
    qf.assign(R * Dp, 0.0f);
    lo.assign(Dp, 0.0f);
    hi.assign(Dp, 0.0f);
    sc.resize(M);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t d = 0; d < D; ++d) {
        const float x = param_at(qv, int(q_kind), (bh * R + r) * D + d);
        qf[r * Dp + d] = x;
        qp[r * Dp + d] = std::max(x, 0.0f);
        qn[r * Dp + d] = std::min(x, 0.0f);
      }
    const int64_t* row = table + bh * M;
    thread_local std::vector<uint8_t> redo;
    redo.assign(M, 1);
    if (D % 16 == 0 && (R == 1 || R == 2 || R == 4 || R == 8 || R == 16)) {
      switch (R) {
        case 1: quest_blocks<1>(qp.data(), qn.data(), lo_p, hi_p, int(b_kind), row, H, h, D, M, sc.data(), redo.data()); break;
        case 2: quest_blocks<2>(qp.data(), qn.data(), lo_p, hi_p, int(b_kind), row, H, h, D, M, sc.data(), redo.data()); break;
        case 4: quest_blocks<4>(qp.data(), qn.data(), lo_p, hi_p, int(b_kind), row, H, h, D, M, sc.data(), redo.data()); break;
        case 8: quest_blocks<8>(qp.data(), qn.data(), lo_p, hi_p, int(b_kind), row, H, h, D, M, sc.data(), redo.data()); break;
        default: quest_blocks<16>(qp.data(), qn.data(), lo_p, hi_p, int(b_kind), row, H, h, D, M, sc.data(), redo.data());
      }
    }
    for (int64_t m = 0; m < M; ++m) {
      const int64_t slot = row[m];
      if (slot < 0) {
        sc[m] = NEG_INF;
        continue;
      }
      if (!redo[m]) continue;  // scored above
      const int64_t first = (slot * H + h) * D;
      if (D % 16 == 0) {
        for (int64_t c = 0; c < D; c += 16) {
          storev(lo.data() + c, params16(lo_p, int(b_kind), first + c));
          storev(hi.data() + c, params16(hi_p, int(b_kind), first + c));
        }
      } else {
        for (int64_t d = 0; d < D; ++d) {
          lo[d] = param_at(lo_p, int(b_kind), first + d);
          hi[d] = param_at(hi_p, int(b_kind), first + d);
        }
      }
      float best = NEG_INF;
      bool nan = false;
      for (int64_t r = 0; r < R; ++r) {
        // max(q kmin, q kmax) = max(q, 0) kmax + min(q, 0) kmin when the bounds are finite (kmin <= kmax);
        // a non-finite result (an empty block's infinite bounds) is redone elementwise, as the reference does.
        vf acc = vf{};
        for (int64_t c = 0; c < Dp; c += 16)
          acc += loadv<vf>(qp.data() + r * Dp + c) * loadv<vf>(hi.data() + c) +
                 loadv<vf>(qn.data() + r * Dp + c) * loadv<vf>(lo.data() + c);
        float v = hsum(acc);
        if (!std::isfinite(v)) {
          v = 0.0f;
          for (int64_t d = 0; d < D; ++d) {
            const float a = qf[r * Dp + d] * lo[d], b = qf[r * Dp + d] * hi[d];
            v += (std::isnan(a) || std::isnan(b)) ? std::numeric_limits<float>::quiet_NaN() : std::max(a, b);
          }
        }
        if (std::isnan(v)) nan = true;
        best = std::max(best, v);
      }
      sc[m] = nan ? std::numeric_limits<float>::quiet_NaN() : best;
    }
    if (scores_out) std::copy(sc.begin(), sc.end(), scores_out + bh * M);
    if (k < 0) continue;
    // Rank: padding -inf, always-kept +inf, NaN above everything (as torch.topk orders it).
    const uint8_t* keep = always ? always + bh * M : nullptr;
    auto rank = [&](int64_t m) -> float {
      if (row[m] < 0) return NEG_INF;
      if (keep && keep[m]) return std::numeric_limits<float>::infinity();
      return sc[m];
    };
    order.resize(M);
    for (int64_t m = 0; m < M; ++m) order[m] = m;
    auto better = [&](int64_t a, int64_t b) {
      const float ra = rank(a), rb = rank(b);
      const bool na = std::isnan(ra), nb = std::isnan(rb);
      if (na != nb) return na;
      if (!na && ra != rb) return ra > rb;
      return a < b;
    };
    if (k > 0 && k < M) std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), better);
    std::sort(order.begin(), order.begin() + k);
    int64_t* o = out + bh * k;
    for (int64_t i = 0; i < k; ++i) {
      const int64_t m = order[i];
      o[i] = rank(m) == NEG_INF ? -1 : row[m];
    }
  }
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "minutia fused CPU decode attention over paged, quantized KV blocks";
  m.def("decode", &decode, "fused block-sparse decode attention (raw pointers; see kernels/cpu_decode.py)");
  m.def("quest_select", &quest_select, "Quest block bounds and top-k selection (raw pointers; see kernels/cpu_decode.py)");
}
