// The CPU flash attention kernels, written once against a SIMD policy `V`
// and compiled once per instruction set: flash_attn_cpu/ (baseline ISA,
// vec_portable.h), flash_attn_cpu_avx512/ and flash_attn_cpu_avx512_bf16/
// (vec_avx512.h, their own cxx-flags). Everything here has internal linkage
// (anonymous namespace), and the file includes no torch or standard library
// code: no AVX-512 copy of an inline function can stand in for a baseline
// one at link time, and the units only meet through cpu_kernels.h.
//
// Forward (flash-attn 2's algorithm): a work item is (sequence, head, block
// of kBlockQ queries). K and V are first packed per (sequence, kv head, block
// of kBlockK keys) into the layout the tiles read (K transposed), shared by
// every query block and every q head of a GQA group. For each key block,
// register-tiled rows of S = Q K^T are computed, then the online softmax
// (running max m and sum l per row, in the log2 domain), then O = alpha * O
// + P V. Causal calls skip key blocks above the diagonal and rows of a block
// that see none of its keys. Work items are handed out dynamically (an atomic
// counter), heaviest first, so causal rows and a busy core balance out; the
// packing and the query blocks share one parallel region (one fork and join).
//
// Backward (flash-attn 2's, deterministic): delta = rowsum(dO * O) comes from
// the glue. Pass A, per (sequence, kv head, key block), recomputes P from the
// saved lse, dP = dO V^T and dS = P * (dP - delta), and accumulates
// dV = P^T dO and dK = dS^T Q over the group's heads and query blocks; pass
// B, per (sequence, head, query block), accumulates dQ = dS K. Each output
// row has one owner, so there are no atomics.
#pragma once

#include <cstdint>

#include "flash_attn_cpu/cpu_kernels.h"

namespace flash_attn {
namespace cpu {
namespace {

constexpr int kBlockK = 128;  // keys per block: the columns of an S tile
constexpr int kBlockQ = 128; // queries per work item
constexpr int kRows = 6;     // rows of a register tile (x 4 vectors of 16)
constexpr int kCols = 64;    // columns of a register tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

inline float neg_inf() { return -__builtin_inff(); }
inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
inline float fmax1(float a, float b) { return a > b ? a : b; }

inline float bf16_to_f32(uint16_t h) {
  return __builtin_bit_cast(float, static_cast<uint32_t>(h) << 16);
}
// Round to nearest even; NaN stays NaN (as c10::BFloat16 does).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = __builtin_bit_cast(uint32_t, f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// n elements of a q/k/v row (fp32 or bf16; the glue converts fp16) as fp32.
inline void load_row(const void *base, int64_t offset, DType dtype, float *dst, int n) {
  if (dtype == DType::kFloat32) {
    const float *src = static_cast<const float *>(base) + offset;
    for (int i = 0; i < n; ++i) dst[i] = src[i];
  } else {
    const uint16_t *src = static_cast<const uint16_t *>(base) + offset;
    for (int i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
  }
}

inline void store_row(void *base, int64_t offset, DType dtype, const float *src, int n) {
  if (dtype == DType::kFloat32) {
    float *dst = static_cast<float *>(base) + offset;
    for (int i = 0; i < n; ++i) dst[i] = src[i];
  } else {
    uint16_t *dst = static_cast<uint16_t *>(base) + offset;
    for (int i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
  }
}

// ---- threads ----------------------------------------------------------------

template <class F>
void parallel_chunks(const Runtime &rt, int64_t n, F &f) {
  if (n <= 0) return;
  rt.parallel_for(n, &f, [](void *ctx, int64_t begin, int64_t end) {
    (*static_cast<F *>(ctx))(begin, end);
  });
}

// f(slot, item) for every item in [0, n), items taken in order from a shared
// counter by up to num_threads slots; slot indexes the per-thread scratch.
template <class F>
void run_items(const Runtime &rt, int64_t n, F &f) {
  int64_t next = 0;
  auto body = [&](int64_t begin, int64_t end) {
    for (int64_t slot = begin; slot < end; ++slot) {
      for (int64_t item; (item = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED)) < n;) {
        f(slot, item);
      }
    }
  };
  parallel_chunks(rt, min64(rt.num_threads, n), body);
}

// A hint to the core while spinning on another thread's progress.
inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

// ---- workspace ----------------------------------------------------------------

// Carves 64-byte aligned arrays out of the workspace; with base == nullptr it
// only counts bytes (the glue allocates `used`).
struct Carver {
  char *base;
  int64_t used = 0;
  template <class T>
  T *take(int64_t count) {
    used = (used + 63) & ~int64_t(63);
    T *p = base ? reinterpret_cast<T *>(base + used) : nullptr;
    used += count * static_cast<int64_t>(sizeof(T));
    return p;
  }
};

// The sequences' blocks: kblk[b] = key blocks before sequence b, qitem[b] =
// work items (query blocks x heads) before it.
struct Blocks {
  int64_t *kblk = nullptr;
  int64_t *qitem = nullptr;
  int64_t total_kblocks = 0, total_qitems = 0;

  void fill(const FwdParams &p) {
    int64_t k = 0, q = 0;
    for (int64_t b = 0; b < p.batch; ++b) {
      if (kblk) kblk[b] = k, qitem[b] = q;
      k += cdiv(p.len_k(b), kBlockK);
      q += cdiv(p.len_q(b), kBlockQ) * p.heads;
    }
    if (kblk) kblk[p.batch] = k, qitem[p.batch] = q;
    total_kblocks = k, total_qitems = q;
  }
  void take(Carver &c, const FwdParams &p) {
    kblk = c.take<int64_t>(p.batch + 1);
    qitem = c.take<int64_t>(p.batch + 1);
    fill(p);
  }
  // The sequence b with off[b] <= idx < off[b + 1] (off non-decreasing).
  static int64_t find(const int64_t *off, int64_t batch, int64_t idx) {
    int64_t lo = 0, hi = batch;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (off[mid] <= idx) lo = mid; else hi = mid - 1;
    }
    return lo;
  }

  // Packed key block idx in [0, heads_k * total_kblocks): kv head, sequence,
  // first key and number of keys.
  struct Key {
    int64_t kvh, b, j0, kn;
  };
  Key key(const FwdParams &p, int64_t idx) const {
    Key k;
    k.kvh = idx / total_kblocks;
    const int64_t g = idx % total_kblocks;
    k.b = find(kblk, p.batch, g);
    k.j0 = (g - kblk[k.b]) * kBlockK;
    k.kn = min64(kBlockK, p.len_k(k.b) - k.j0);
    return k;
  }
  // The packed block of (kv head, sequence b) that holds key j0.
  int64_t block_of(int64_t kvh, int64_t b, int64_t j0) const {
    return kvh * total_kblocks + kblk[b] + j0 / kBlockK;
  }

  // Work item it in [0, total_qitems): sequence b, head h, rows i0 ..
  // i0 + rows of the query block; keys j < kend can be seen (off = sk - sq:
  // query i sees keys j <= i + off when causal). Within a sequence, head by
  // head (consecutive items share K/V blocks in cache), and within a head
  // the last query blocks (the most keys when causal) first.
  struct Query {
    int64_t b, h, kvh, i0, rows, sq, sk, off, kend;
  };
  Query query(const FwdParams &p, int64_t it) const {
    Query q;
    q.b = find(qitem, p.batch, it);
    const int64_t local = it - qitem[q.b];
    q.sq = p.len_q(q.b), q.sk = p.len_k(q.b), q.off = q.sk - q.sq;
    const int64_t blocks = cdiv(q.sq, kBlockQ);
    q.h = local / blocks;
    q.kvh = q.h / (p.heads / p.heads_k);
    q.i0 = (blocks - 1 - local % blocks) * kBlockQ;
    q.rows = min64(kBlockQ, q.sq - q.i0);
    q.kend = p.causal ? max64(0, min64(q.sk, q.i0 + q.rows + q.off)) : q.sk;
    return q;
  }
};

// The first row of a query block (i0, rows) that sees any key of the block at
// j0: rows before it see none of these keys (nor later ones) when causal.
inline int64_t first_row(const FwdParams &p, int64_t i0, int64_t rows, int64_t j0, int64_t off) {
  return p.causal ? max64(0, min64(rows, j0 - off - i0)) : 0;
}

// ---- fp32 register tiles -----------------------------------------------------

enum Mode { kOverwrite, kAccumulate, kScaleAccumulate };

// C[MR][64] (=, +=, or = beta[r] * C +) A[MR][K] B[K][64]. A is read one
// element at a time (any strides: A^T of a tile is a plain stride swap); B's
// rows are 64 contiguous floats, ldb apart. The MR x 4 accumulator vectors
// stay in registers (24 of the 32 zmm registers for MR = 6).
template <class V, int MR, int MODE>
inline void micro_tile(int64_t K, const float *A, int64_t a_rs, int64_t a_cs,
                       const float *B, int64_t ldb, float *C, int64_t ldc,
                       const float *beta) {
  using F = typename V::F;
  constexpr int W = V::W, NV = kCols / V::W;
  F acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      if (MODE == kOverwrite) {
        acc[r][v] = V::zero();
      } else if (MODE == kAccumulate) {
        acc[r][v] = V::load(C + r * ldc + v * W);
      } else {
        acc[r][v] = V::mul(V::load(C + r * ldc + v * W), V::set1(beta[r]));
      }
    }
  }
  for (int64_t k = 0; k < K; ++k) {
    F b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) b[v] = V::load(B + k * ldb + v * W);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const F a = V::set1(A[r * a_rs + k * a_cs]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = V::fma(a, b[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) V::store(C + r * ldc + v * W, acc[r][v]);
  }
}

// C[M][N] (mode) A[M][K] B[K][N] for N a multiple of 64, in register tiles.
template <class V, int MODE>
void gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t a_rs, int64_t a_cs,
          const float *B, int64_t ldb, float *C, int64_t ldc, const float *beta = nullptr) {
  for (int64_t n0 = 0; n0 < N; n0 += kCols) {
    for (int64_t m0 = 0; m0 < M; m0 += kRows) {
      const float *a = A + m0 * a_rs;
      const float *b = B + n0;
      float *c = C + m0 * ldc + n0;
      const float *bt = beta ? beta + m0 : nullptr;
      switch (min64(kRows, M - m0)) {
        case 6: micro_tile<V, 6, MODE>(K, a, a_rs, a_cs, b, ldb, c, ldc, bt); break;
        case 5: micro_tile<V, 5, MODE>(K, a, a_rs, a_cs, b, ldb, c, ldc, bt); break;
        case 4: micro_tile<V, 4, MODE>(K, a, a_rs, a_cs, b, ldb, c, ldc, bt); break;
        case 3: micro_tile<V, 3, MODE>(K, a, a_rs, a_cs, b, ldb, c, ldc, bt); break;
        case 2: micro_tile<V, 2, MODE>(K, a, a_rs, a_cs, b, ldb, c, ldc, bt); break;
        default: micro_tile<V, 1, MODE>(K, a, a_rs, a_cs, b, ldb, c, ldc, bt); break;
      }
    }
  }
}

// dst[d * kBlockK + j] = element d of key j of a block (K^T or V^T), where
// load(j, row) writes the D elements of key j (zeros past the sequence). Keys
// go 16 at a time through a small buffer, transposed 16 x 16 at a time by the
// SIMD policy, so that the strided writes fill whole cache lines while
// everything stays in L1.
template <class V, int D, class Load>
inline void pack_transposed(float *dst, Load &&load) {
  constexpr int kKeys = 16;
  static_assert(D % kKeys == 0 && kBlockK % kKeys == 0, "16 x 16 transposes");
  float rows[kKeys][D];
  for (int64_t j0 = 0; j0 < kBlockK; j0 += kKeys) {
    for (int jj = 0; jj < kKeys; ++jj) load(j0 + jj, rows[jj]);
    for (int d0 = 0; d0 < D; d0 += kKeys) V::transpose16(&rows[0][d0], D, dst + d0 * kBlockK + j0, kBlockK);
  }
}

// The forward's tiles in fp32 (fp32 inputs, and bf16 inputs converted when
// they are packed): Q rows fp32, K blocks transposed [D][kBlockK], P fp32.
// V rows are read where they are for fp32 inputs (the P V tile takes any row
// stride), converted into [kBlockK][D] blocks for bf16.
template <class V, int D>
struct F32Tiles {
  static constexpr int kD = D;
  using QElem = float;
  using KElem = float;
  using VElem = float;
  using PElem = float;
  static constexpr int64_t kKBlock = int64_t(D) * kBlockK;  // elements per packed block
  static constexpr int64_t kVBlock = int64_t(D) * kBlockK;
  struct VBlock {
    const float *rows;
    int64_t ld;  // elements between rows
  };

  static void load_q(const FwdParams &p, int64_t b, int64_t h, int64_t i0, int64_t rows, float *q) {
    for (int64_t r = 0; r < rows; ++r) load_row(p.q, p.q_offset(b, i0 + r, h), p.dtype, q + r * D, D);
  }
  static void pack_k(const FwdParams &p, int64_t b, int64_t kvh, int64_t j0, int64_t kn, float *kt) {
    pack_transposed<V, D>(kt, [&](int64_t j, float *row) {
      if (j < kn) {
        load_row(p.k, p.k_offset(b, j0 + j, kvh), p.dtype, row, D);
      } else {
        for (int d = 0; d < D; ++d) row[d] = 0.0f;
      }
    });
  }
  static bool packs_v(const FwdParams &p) { return p.dtype != DType::kFloat32; }
  static void pack_v(const FwdParams &p, int64_t b, int64_t kvh, int64_t j0, int64_t kn, float *vb) {
    for (int64_t j = 0; j < kn; ++j) load_row(p.v, p.v_offset(b, j0 + j, kvh), p.dtype, vb + j * D, D);
  }
  // The key block at j0 of V: packed (bf16 inputs) or in place (fp32).
  static VBlock v_block(const FwdParams &p, const float *packed, int64_t b, int64_t kvh, int64_t j0) {
    if (packs_v(p)) return {packed, D};
    return {static_cast<const float *>(p.v) + p.v_offset(b, j0, kvh), p.v_row_stride};
  }
  static void store_p(float *dst, typename V::F p) { V::store(dst, p); }
  // s[rows][kBlockK] = q[rows][D] kt
  static void qk(int rows, const float *q, const float *kt, float *s) {
    gemm<V, kOverwrite>(rows, kBlockK, D, q, D, 1, kt, kBlockK, s, kBlockK);
  }
  // o[rows][D] = alpha[r] * o + pr[rows][:kn] vb[:kn] (only the block's kn keys are read)
  static void pv(int rows, const float *pr, const VBlock &vb, int64_t kn, float *o, const float *alpha) {
    gemm<V, kScaleAccumulate>(rows, D, kn, pr, kBlockK, 1, vb.rows, vb.ld, o, D, alpha);
  }
};

// ---- the online softmax of one row of a tile ----------------------------------

// One S row of a key block, in the log2 domain: the scores t = s * c (c =
// softmax_scale * log2(e)) plus the ALiBi bias, keys at or past `lim` masked.
// Updates the row's running max m, adds p = exp2(t - m) (0 where masked) to
// the row's vector of partial sums lv, writes p to prow, and returns alpha =
// exp2(m_old - m_new), the factor for what the row accumulated so far.
// Without a bias (and c > 0) the max is taken on the raw scores and the scale
// folds into the exponent's FMA.
template <class V, class Tiles>
inline float softmax_row(const float *s, int64_t lim, float c, float slope2, float dist0,
                         float &m, float *lv, typename Tiles::PElem *prow) {
  using F = typename V::F;
  constexpr int W = V::W, NV = kBlockK / V::W;
  const bool direct = slope2 == 0.0f && c > 0.0f;
  const float k = direct ? c : 1.0f;
  F t[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    t[v] = V::load(s + v * W);
    if (!direct) {
      t[v] = V::mul(t[v], V::set1(c));
      // -slope * |i + off - j| with j = j0 + lane; dist0 = j0 - (i + off).
      const F dist = V::abs(V::add(V::iota(), V::set1(dist0 + float(v * W))));
      t[v] = V::fma(dist, V::set1(-slope2), t[v]);
    }
    if (lim < kBlockK) t[v] = V::keep_first(t[v], lim - v * W, neg_inf());
  }
  F mv = t[0];
#pragma GCC unroll 8
  for (int v = 1; v < NV; ++v) mv = V::max(mv, t[v]);
  const float mx = fmax1(m, V::hmax(mv) * k);
  // m == -inf (the row's first block) gives exp2(-inf) = 0.
  const float alpha = mx == m ? 1.0f : __builtin_exp2f(m - mx);
  const F kv = V::set1(k), neg_mx = V::set1(-mx);
  F sum = alpha == 1.0f ? V::load(lv) : V::mul(V::load(lv), V::set1(alpha));
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    F pv = V::exp2(V::fma(t[v], kv, neg_mx));
    if (lim < kBlockK) pv = V::keep_first(pv, lim - v * W, 0.0f);
    sum = V::add(sum, pv);
    Tiles::store_p(prow + v * W, pv);
  }
  V::store(lv, sum);
  m = mx;
  return alpha;
}

// ---- forward -----------------------------------------------------------------------

template <class V, class Tiles>
struct Forward {
  static constexpr int D = Tiles::kD;
  using QE = typename Tiles::QElem;
  using KE = typename Tiles::KElem;
  using VE = typename Tiles::VElem;
  using PE = typename Tiles::PElem;

  struct Scratch {
    QE *q;
    float *s, *o, *m, *l, *alpha;
    PE *p;
  };
  struct Parts {
    Blocks blocks;
    KE *k = nullptr;
    VE *v = nullptr;
    char *scratch = nullptr;
    int64_t scratch_bytes = 0;
  };

  static Scratch take_scratch(Carver &c) {
    Scratch s;
    s.q = c.take<QE>(int64_t(kBlockQ) * D);
    s.o = c.take<float>(int64_t(kBlockQ) * D);
    s.s = c.take<float>(int64_t(kRows) * kBlockK);
    s.p = c.take<PE>(int64_t(kRows) * kBlockK);
    s.m = c.take<float>(kBlockQ);
    s.l = c.take<float>(int64_t(kBlockQ) * V::W);  // per-row vectors of partial sums
    s.alpha = c.take<float>(kRows);
    return s;
  }

  static int64_t layout(const FwdParams &p, int threads, char *base, Parts *parts) {
    Carver c{base};
    Parts local;
    Parts &w = parts ? *parts : local;
    w.blocks.take(c, p);
    const int64_t blocks = int64_t(p.heads_k) * w.blocks.total_kblocks;
    w.k = c.take<KE>(blocks * Tiles::kKBlock);
    w.v = c.take<VE>(Tiles::packs_v(p) ? blocks * Tiles::kVBlock : 0);
    Carver one{nullptr};
    take_scratch(one);
    w.scratch_bytes = (one.used + 63) & ~int64_t(63);
    w.scratch = c.take<char>(w.scratch_bytes * threads);
    return c.used;
  }

  static void run(const FwdParams &p, const Runtime &rt, void *workspace) {
    Parts w;
    layout(p, rt.num_threads, static_cast<char *>(workspace), &w);
    const Blocks &bl = w.blocks;

    // One parallel region for the whole call, its items from one counter: first
    // the packing of K and V, once per (kv head, key block), then the query
    // blocks. Every packing item is handed out before any query block, so a
    // query block only waits for packings still in flight on other threads.
    // (A separate packing region costs a second fork and join per call; on a
    // loaded machine, where a thread may wait a time slice to run, that made
    // calls of a few milliseconds up to 1.5x slower.)
    const int64_t n_pack = int64_t(p.heads_k) * bl.total_kblocks;
    int64_t packed = 0;  // packing items finished
    auto item = [&](int64_t slot, int64_t it) {
      if (it < n_pack) {
        const Blocks::Key k = bl.key(p, it);
        Tiles::pack_k(p, k.b, k.kvh, k.j0, k.kn, w.k + it * Tiles::kKBlock);
        if (Tiles::packs_v(p)) Tiles::pack_v(p, k.b, k.kvh, k.j0, k.kn, w.v + it * Tiles::kVBlock);
        __atomic_fetch_add(&packed, 1, __ATOMIC_ACQ_REL);
        return;
      }
      while (__atomic_load_n(&packed, __ATOMIC_ACQUIRE) < n_pack) spin_pause();
      Carver c{w.scratch + slot * w.scratch_bytes};
      query_block(p, w, take_scratch(c), it - n_pack);
    };
    run_items(rt, n_pack + bl.total_qitems, item);
  }

  static void query_block(const FwdParams &p, const Parts &w, const Scratch &sc, int64_t it) {
    const Blocks::Query qi = w.blocks.query(p, it);
    const int64_t b = qi.b, h = qi.h, i0 = qi.i0, rows = qi.rows, off = qi.off, kend = qi.kend;
    const float c = p.softmax_scale * kLog2e;
    const float slope2 = p.alibi_slope(b, h) * kLog2e;

    for (int64_t r = 0; r < rows; ++r) sc.m[r] = neg_inf();
    for (int64_t e = 0; e < rows * V::W; ++e) sc.l[e] = 0.0f;
    for (int64_t e = 0; e < rows * D; ++e) sc.o[e] = 0.0f;
    if (kend > 0) Tiles::load_q(p, b, h, i0, rows, sc.q);

    for (int64_t j0 = 0; j0 < kend; j0 += kBlockK) {
      const int64_t kn = min64(kBlockK, kend - j0);
      const int64_t r_first = first_row(p, i0, rows, j0, off);
      const int64_t blk = w.blocks.block_of(qi.kvh, b, j0);
      const KE *kt = w.k + blk * Tiles::kKBlock;
      const typename Tiles::VBlock vb = Tiles::v_block(p, w.v + blk * Tiles::kVBlock, b, qi.kvh, j0);
      for (int64_t r0 = r_first; r0 < rows; r0 += kRows) {
        const int mr = static_cast<int>(min64(kRows, rows - r0));
        Tiles::qk(mr, sc.q + r0 * D, kt, sc.s);
        for (int rr = 0; rr < mr; ++rr) {
          const int64_t i = i0 + r0 + rr;
          const int64_t lim = p.causal ? min64(kn, i + off + 1 - j0) : kn;
          sc.alpha[rr] = softmax_row<V, Tiles>(sc.s + rr * kBlockK, lim, c, slope2,
                                               float(j0 - i - off), sc.m[r0 + rr],
                                               sc.l + (r0 + rr) * V::W, sc.p + rr * kBlockK);
        }
        Tiles::pv(mr, sc.p, vb, kn, sc.o + r0 * D, sc.alpha);
      }
    }

    // out = O / l and lse = ln(sum of exp(scores)); rows that saw no key
    // (causal with seqlen_q > seqlen_k, or no keys at all) get 0 and +inf.
    float row[D];
    for (int64_t r = 0; r < rows; ++r) {
      const float l = V::hsum(V::load(sc.l + r * V::W));
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      for (int d = 0; d < D; ++d) row[d] = sc.o[r * D + d] * inv;
      store_row(p.out, p.o_offset(b, i0 + r, h), p.dtype, row, D);
      p.lse[p.lse_offset(b, i0 + r, h)] =
          l > 0.0f ? (sc.m[r] + __builtin_log2f(l)) * kLn2 : __builtin_inff();
    }
  }
};

// ---- backward -------------------------------------------------------------------

template <class V, int D>
struct Backward {
  struct Scratch {
    float *s, *p, *ds, *acc1, *acc2;
  };
  struct Parts {
    Blocks blocks;
    float *kt = nullptr, *vt = nullptr;  // packed K^T and V^T blocks [D][kBlockK]
    char *scratch = nullptr;
    int64_t scratch_bytes = 0;
  };
  static constexpr int64_t kBlockElems = int64_t(D) * kBlockK;
  static constexpr int64_t kTile = int64_t(kBlockQ) * kBlockK;

  static Scratch take_scratch(Carver &c) {
    Scratch s;
    s.s = c.take<float>(kTile);
    s.p = c.take<float>(kTile);
    s.ds = c.take<float>(kTile);
    s.acc1 = c.take<float>(int64_t(kBlockQ > kBlockK ? kBlockQ : kBlockK) * D);
    s.acc2 = c.take<float>(int64_t(kBlockK) * D);
    return s;
  }

  static int64_t layout(const BwdParams &bp, int threads, char *base, Parts *parts) {
    Carver c{base};
    Parts local;
    Parts &w = parts ? *parts : local;
    w.blocks.take(c, bp.fwd);
    const int64_t blocks = int64_t(bp.fwd.heads_k) * w.blocks.total_kblocks;
    w.kt = c.take<float>(blocks * kBlockElems);
    w.vt = c.take<float>(blocks * kBlockElems);
    Carver one{nullptr};
    take_scratch(one);
    w.scratch_bytes = (one.used + 63) & ~int64_t(63);
    w.scratch = c.take<char>(w.scratch_bytes * threads);
    return c.used;
  }

  // P and dS (scaled by softmax_scale) of `rows` queries from i0 against the
  // key block at j0 (kn keys): s <- Q K^T, ds <- dO V^T, then p, ds.
  static void p_and_ds(const BwdParams &bp, const Scratch &sc, int64_t b, int64_t h,
                       int64_t i0, int64_t rows, int64_t j0, int64_t kn, int64_t off,
                       const float *kt, const float *vt) {
    const FwdParams &p = bp.fwd;
    const float *q = static_cast<const float *>(p.q) + p.q_offset(b, i0, h);
    const float *dout = bp.dout + p.o_offset(b, i0, h);
    gemm<V, kOverwrite>(rows, kBlockK, D, q, p.q_row_stride, 1, kt, kBlockK, sc.s, kBlockK);
    gemm<V, kOverwrite>(rows, kBlockK, D, dout, p.o_row_stride, 1, vt, kBlockK, sc.ds, kBlockK);
    using F = typename V::F;
    constexpr int W = V::W, NV = kBlockK / V::W;
    const float c = p.softmax_scale * kLog2e;
    const float slope2 = p.alibi_slope(b, h) * kLog2e;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      const int64_t lim = p.causal ? min64(kn, i + off + 1 - j0) : kn;
      const float lse = p.lse[p.lse_offset(b, i, h)];
      const float delta = bp.delta[p.lse_offset(b, i, h)];
      const bool empty = lse == __builtin_inff() || lim <= 0;  // the row saw no key
      const F lse2 = V::set1(lse * kLog2e);
      const float dist0 = float(j0 - i - off);
      for (int v = 0; v < NV; ++v) {
        F t = V::mul(V::load(sc.s + r * kBlockK + v * W), V::set1(c));
        if (slope2 != 0.0f) {
          const F dist = V::abs(V::add(V::iota(), V::set1(dist0 + float(v * W))));
          t = V::fma(dist, V::set1(-slope2), t);
        }
        F pr = empty ? V::zero() : V::keep_first(V::exp2(V::sub(t, lse2)), lim - v * W, 0.0f);
        const F dp = V::load(sc.ds + r * kBlockK + v * W);
        V::store(sc.p + r * kBlockK + v * W, pr);
        V::store(sc.ds + r * kBlockK + v * W,
                 V::mul(V::mul(pr, V::sub(dp, V::set1(delta))), V::set1(p.softmax_scale)));
      }
    }
  }

  static void run(const BwdParams &bp, const Runtime &rt, void *workspace) {
    const FwdParams &p = bp.fwd;
    Parts w;
    layout(bp, rt.num_threads, static_cast<char *>(workspace), &w);
    const Blocks &bl = w.blocks;
    const float *kf = static_cast<const float *>(p.k);
    const float *vf = static_cast<const float *>(p.v);

    auto pack = [&](int64_t begin, int64_t end) {
      for (int64_t idx = begin; idx < end; ++idx) {
        const Blocks::Key k = bl.key(p, idx);
        const auto rows_of = [&](const float *base, int64_t (FwdParams::*offset)(int64_t, int64_t, int64_t) const) {
          return [&, base, offset](int64_t j, float *row) {
            const float *src = j < k.kn ? base + (p.*offset)(k.b, k.j0 + j, k.kvh) : nullptr;
            for (int d = 0; d < D; ++d) row[d] = src ? src[d] : 0.0f;
          };
        };
        pack_transposed<V, D>(w.kt + idx * kBlockElems, rows_of(kf, &FwdParams::k_offset));
        pack_transposed<V, D>(w.vt + idx * kBlockElems, rows_of(vf, &FwdParams::v_offset));
      }
    };
    parallel_chunks(rt, int64_t(p.heads_k) * bl.total_kblocks, pack);

    // Pass A: dK and dV of one key block of one kv head.
    const int64_t group = p.heads / p.heads_k;
    auto key_block = [&](int64_t slot, int64_t idx) {
      Carver c{w.scratch + slot * w.scratch_bytes};
      const Scratch sc = take_scratch(c);
      const Blocks::Key key = bl.key(p, idx);
      const int64_t b = key.b, kvh = key.kvh, j0 = key.j0, kn = key.kn;
      const int64_t sq = p.len_q(b), off = p.len_k(b) - sq;
      float *dk = sc.acc1, *dv = sc.acc2;
      for (int64_t e = 0; e < kBlockElems; ++e) dk[e] = 0.0f, dv[e] = 0.0f;
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int64_t i0 = 0; i0 < sq; i0 += kBlockQ) {
          const int64_t rows = min64(kBlockQ, sq - i0);
          const int64_t r_first = first_row(p, i0, rows, j0, off);
          if (r_first == rows) continue;  // no row of this block sees these keys
          const int64_t ii = i0 + r_first, n = rows - r_first;
          p_and_ds(bp, sc, b, h, ii, n, j0, kn, off, w.kt + idx * kBlockElems,
                   w.vt + idx * kBlockElems);
          // dV += P^T dO and dK += dS^T Q: A^T by swapping A's strides.
          gemm<V, kAccumulate>(kBlockK, D, n, sc.p, 1, kBlockK, bp.dout + p.o_offset(b, ii, h),
                               p.o_row_stride, dv, D);
          gemm<V, kAccumulate>(kBlockK, D, n, sc.ds, 1, kBlockK,
                               static_cast<const float *>(p.q) + p.q_offset(b, ii, h),
                               p.q_row_stride, dk, D);
        }
      }
      for (int64_t j = 0; j < kn; ++j) {
        float *dkr = bp.dk + p.k_offset(b, j0 + j, kvh);
        float *dvr = bp.dv + p.v_offset(b, j0 + j, kvh);
        for (int d = 0; d < D; ++d) dkr[d] = dk[j * D + d], dvr[d] = dv[j * D + d];
      }
    };
    run_items(rt, int64_t(p.heads_k) * bl.total_kblocks, key_block);

    // Pass B: dQ of one query block of one head.
    auto query_block = [&](int64_t slot, int64_t it) {
      Carver c{w.scratch + slot * w.scratch_bytes};
      const Scratch sc = take_scratch(c);
      const Blocks::Query qi = bl.query(p, it);
      const int64_t b = qi.b, h = qi.h, kvh = qi.kvh, i0 = qi.i0, rows = qi.rows, off = qi.off;
      float *dq = sc.acc1;
      for (int64_t e = 0; e < rows * D; ++e) dq[e] = 0.0f;
      for (int64_t j0 = 0; j0 < qi.kend; j0 += kBlockK) {
        const int64_t kn = min64(kBlockK, qi.sk - j0);
        const int64_t r_first = first_row(p, i0, rows, j0, off);
        const int64_t ii = i0 + r_first, n = rows - r_first;
        const int64_t blk = bl.block_of(kvh, b, j0);
        p_and_ds(bp, sc, b, h, ii, n, j0, kn, off, w.kt + blk * kBlockElems,
                 w.vt + blk * kBlockElems);
        gemm<V, kAccumulate>(n, D, kn, sc.ds, kBlockK, 1, kf + p.k_offset(b, j0, kvh),
                             p.k_row_stride, dq + r_first * D, D);
      }
      for (int64_t r = 0; r < rows; ++r) {
        float *dqr = bp.dq + p.q_offset(b, i0 + r, h);
        for (int d = 0; d < D; ++d) dqr[d] = dq[r * D + d];
      }
    };
    run_items(rt, bl.total_qitems, query_block);
  }
};

// ---- entry points -----------------------------------------------------------------

// One ISA's kernels: V the SIMD policy, Tiles the forward's tiles (F32Tiles
// or the bf16 dot-product tiles); head_dim picks the instantiation.
template <class V, template <class, int> class Tiles>
struct Entry {
  static int64_t fwd_workspace(const FwdParams &p, int threads) {
    return p.head_dim == 64 ? Forward<V, Tiles<V, 64>>::layout(p, threads, nullptr, nullptr)
                            : Forward<V, Tiles<V, 128>>::layout(p, threads, nullptr, nullptr);
  }
  static void fwd(const FwdParams &p, const Runtime &rt, void *ws) {
    if (p.head_dim == 64) {
      Forward<V, Tiles<V, 64>>::run(p, rt, ws);
    } else {
      Forward<V, Tiles<V, 128>>::run(p, rt, ws);
    }
  }
  static int64_t bwd_workspace(const BwdParams &p, int threads) {
    return p.fwd.head_dim == 64 ? Backward<V, 64>::layout(p, threads, nullptr, nullptr)
                                : Backward<V, 128>::layout(p, threads, nullptr, nullptr);
  }
  static void bwd(const BwdParams &p, const Runtime &rt, void *ws) {
    if (p.fwd.head_dim == 64) {
      Backward<V, 64>::run(p, rt, ws);
    } else {
      Backward<V, 128>::run(p, rt, ws);
    }
  }
};

}  // namespace
}  // namespace cpu
}  // namespace flash_attn
