// Native llama.cpp's (ggml's) CPU dot products, one thread, on the matrix `clef bench-kernels
// --rows R` multiplies: R rows of 4096 weights of each type times one activation row in the
// type's vec_dot format (Q8_K or Q8_0/Q8_1). GB/s of weight bytes, as bench-kernels prints them.
//
//   native_kernels TYPES|all [ROWS] [MS]      e.g. native_kernels IQ2_S,Q6_K 131072 1500
//
// The weights are 64 rows quantized by ggml from normal-ish random values (RMS ~0.03, so that no
// fp16 scale is subnormal) and repeated to ROWS rows: the bytes streamed are those of a real matrix.
// This is the plain `vec_dot` path; llama.cpp's CPU backend multiplies Q4_0, IQ4_NL and Q4_K
// through repacked (row-interleaved) copies instead, faster than this. Built and run by
// tools/native-kernels/run.sh against the build of tools/build-llama.sh.
#include "ggml.h"
#include "ggml-cpu.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static const struct { const char *name; enum ggml_type type; } TYPES[] = {
  {"Q4_0", GGML_TYPE_Q4_0}, {"Q4_1", GGML_TYPE_Q4_1}, {"Q5_0", GGML_TYPE_Q5_0}, {"Q5_1", GGML_TYPE_Q5_1},
  {"Q8_0", GGML_TYPE_Q8_0}, {"Q2_K", GGML_TYPE_Q2_K}, {"Q3_K", GGML_TYPE_Q3_K}, {"Q4_K", GGML_TYPE_Q4_K},
  {"Q5_K", GGML_TYPE_Q5_K}, {"Q6_K", GGML_TYPE_Q6_K}, {"IQ2_XXS", GGML_TYPE_IQ2_XXS}, {"IQ2_XS", GGML_TYPE_IQ2_XS},
  {"IQ2_S", GGML_TYPE_IQ2_S}, {"IQ3_XXS", GGML_TYPE_IQ3_XXS}, {"IQ3_S", GGML_TYPE_IQ3_S}, {"IQ1_S", GGML_TYPE_IQ1_S},
  {"IQ1_M", GGML_TYPE_IQ1_M}, {"IQ4_NL", GGML_TYPE_IQ4_NL}, {"IQ4_XS", GGML_TYPE_IQ4_XS},
};

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: native_kernels TYPES|all [ROWS] [MS]\n");
    return 2;
  }
  const int n = 4096, q = 64;
  const long rows = argc > 2 ? atol(argv[2]) : 131072;
  const double ms = argc > 3 ? atof(argv[3]) : 1500;
  char want[512];
  snprintf(want, sizeof want, ",%s,", argv[1]);
  ggml_cpu_init();
  printf("type      GB/s   (native ggml vec_dot, one thread, %ldx%d matvec)\n", rows, n);
  for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++) {
    char key[32];
    snprintf(key, sizeof key, ",%s,", TYPES[i].name);
    if (strcmp(argv[1], "all") != 0 && !strstr(want, key)) continue;
    const enum ggml_type t = TYPES[i].type;
    const struct ggml_type_traits_cpu *tr = ggml_get_type_traits_cpu(t);
    const size_t rb = ggml_row_size(t, n);
    float *src = malloc(sizeof(float) * n * q), *imat = malloc(sizeof(float) * n);
    srand(1);
    for (long j = 0; j < (long)n * q; j++) {
      float u = 0;
      for (int k = 0; k < 4; k++) u += rand() / (float)RAND_MAX;
      src[j] = (u - 2) * 0.03f;
    }
    for (int j = 0; j < n; j++) imat[j] = 1;  // the IQ2/IQ1 quantizers require an importance matrix
    char *block = malloc(rb * q);
    ggml_quantize_chunk(t, src, block, 0, q, n, imat);
    char *w = aligned_alloc(64, (rb * rows + 63) / 64 * 64);
    for (long r = 0; r < rows; r++) memcpy(w + r * rb, block + (r % q) * rb, rb);
    const enum ggml_type at = tr->vec_dot_type;
    char *act = malloc(ggml_row_size(at, n));
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * rows);
    for (int j = 0; j < n; j++) x[j] = src[j] * 10;
    ggml_get_type_traits_cpu(at)->from_float(x, act, n);
    long passes = 0;
    double t0 = now_s(), t1;
    do {
      for (long r = 0; r < rows; r++) tr->vec_dot(n, y + r, 0, w + r * rb, 0, act, 0, 1);
      passes++;
      t1 = now_s();
    } while ((t1 - t0) * 1e3 < ms);
    printf("%-8s %6.2f\n", TYPES[i].name, (double)rb * rows * passes / (t1 - t0) / 1e9);
    free(src), free(imat), free(block), free(w), free(act), free(x), free(y);
  }
  return 0;
}
