/* op_harness.c — guarded device buffers, normalised-error checks and op runners for the
 * device tests (see op_harness.h). */
#include "op_harness.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { GUARD = 256 }; /* bytes each side; a multiple of 64 keeps the pointer aligned */

/* ---- random inputs ------------------------------------------------------------------------ */

static uint64_t seed_value;
static pthread_once_t seed_once = PTHREAD_ONCE_INIT;

static void seed_init(void) {
  const char *env = getenv("TR_TEST_SEED");
  if (env && *env) {
    seed_value = strtoull(env, NULL, 0);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    seed_value = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec;
  }
}

uint64_t th_seed(void) {
  pthread_once(&seed_once, seed_init);
  return seed_value;
}

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

th_rng th_rng_for(uint64_t stream) {
  uint64_t x = th_seed() ^ (stream * 0xD1B54A32D192ED03ull);
  th_rng r;
  for (int i = 0; i < 4; i++) r.s[i] = splitmix64(&x);
  return r;
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t th_next(th_rng *r) {
  uint64_t *s = r->s;
  const uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

double th_uniform(th_rng *r) { return (double)(th_next(r) >> 11) * 0x1p-53; }

void th_fill_uniform(th_rng *r, float *x, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * th_uniform(r));
}

void th_fill_normal(th_rng *r, float *x, size_t n, float std) {
  for (size_t i = 0; i < n; i++) {
    double u1 = 1.0 - th_uniform(r), u2 = th_uniform(r);
    x[i] = (float)(std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
  }
}

void th_fill_index(th_rng *r, int32_t *x, size_t n, int32_t bound) {
  for (size_t i = 0; i < n; i++) x[i] = (int32_t)(th_next(r) % (uint64_t)bound);
}

/* ---- checks ------------------------------------------------------------------------------- */

static double nerr_impl(const float *x, const double *refd, const float *reff, size_t n,
                        size_t *worst) {
  double num = 0, den = 0, wmax = -1;
  *worst = 0;
  for (size_t i = 0; i < n; i++) {
    const double r = refd ? refd[i] : (double)reff[i], v = (double)x[i];
    if (!isfinite(v) || !isfinite(r)) {
      *worst = i;
      return INFINITY;
    }
    const double e = (v - r) * (v - r);
    num += e;
    den += r * r;
    if (e > wmax) wmax = e, *worst = i;
  }
  return den > 0 ? num / den : num;
}

double th_nerr(const float *x, const double *ref, size_t n) {
  size_t w;
  return nerr_impl(x, ref, NULL, n, &w);
}

double th_nerr_f(const float *x, const float *ref, size_t n) {
  size_t w;
  return nerr_impl(x, NULL, ref, n, &w);
}

static bool check_impl(const char *what, const float *x, const double *refd, const float *reff,
                       size_t n, double tol) {
  size_t w;
  const double e = nerr_impl(x, refd, reff, n, &w);
  if (e <= tol) return true;
  fprintf(stderr,
          "%s: normalised error %.3g > %.1g over %zu elements; worst [%zu]: got %.9g, want %.9g "
          "(TR_TEST_SEED=%" PRIu64 ")\n",
          what, e, tol, n, w, n ? (double)x[w] : 0.0,
          n ? (refd ? refd[w] : (double)reff[w]) : 0.0, th_seed());
  return false;
}

bool th_check(const char *what, const float *x, const double *ref, size_t n, double tol) {
  return check_impl(what, x, ref, NULL, n, tol);
}

bool th_check_f(const char *what, const float *x, const float *ref, size_t n, double tol) {
  return check_impl(what, x, NULL, ref, n, tol);
}

/* ---- guarded buffers ------------------------------------------------------------------------ */

struct th_buf {
  tr_device *dev;
  size_t bytes;
  unsigned char *base; /* device: GUARD + bytes + GUARD */
};

static unsigned char sentinel(size_t i) { return (unsigned char)(0xA5u ^ (i * 37u)); }

th_buf *th_buf_new(tr_device *d, size_t bytes) {
  th_buf *b = calloc(1, sizeof *b);
  unsigned char *pattern = malloc(GUARD);
  if (!b || !pattern) goto fail;
  b->dev = d;
  b->bytes = bytes;
  if (tr_device_alloc(d, bytes + 2 * GUARD, (void **)&b->base)) goto fail;
  for (size_t i = 0; i < GUARD; i++) pattern[i] = sentinel(i);
  tr_stream *s = tr_device_stream(d);
  if (tr_memcpy(s, b->base, pattern, GUARD, TR_COPY_H2D) ||
      tr_memcpy(s, b->base + GUARD + bytes, pattern, GUARD, TR_COPY_H2D) ||
      tr_stream_synchronize(s))
    goto fail;
  free(pattern);
  return b;
fail:
  fprintf(stderr, "th_buf_new(%zu bytes): %s\n", bytes, tr_device_error(d));
  if (b && b->base) tr_device_free(d, b->base);
  free(b);
  free(pattern);
  return NULL;
}

void *th_buf_ptr(th_buf *b) { return b->base + GUARD; }

bool th_buf_guards_intact(th_buf *b, const char *what) {
  unsigned char g[2][GUARD];
  tr_stream *s = tr_device_stream(b->dev);
  if (tr_memcpy(s, g[0], b->base, GUARD, TR_COPY_D2H) ||
      tr_memcpy(s, g[1], b->base + GUARD + b->bytes, GUARD, TR_COPY_D2H) ||
      tr_stream_synchronize(s)) {
    fprintf(stderr, "%s: reading guards: %s\n", what, tr_device_error(b->dev));
    return false;
  }
  bool ok = true;
  for (int side = 0; side < 2; side++)
    for (size_t i = 0; i < GUARD; i++)
      if (g[side][i] != sentinel(i)) {
        fprintf(stderr, "%s on %s: guard byte %s %zu overwritten (0x%02x)\n", what,
                tr_device_name(b->dev), side ? "after the end, at" : "before the start, at -",
                side ? i : GUARD - i, g[side][i]);
        ok = false;
        break;
      }
  return ok;
}

void th_buf_free(th_buf *b) {
  if (!b) return;
  tr_device_free(b->dev, b->base);
  free(b);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "op_harness: out of memory (%zu bytes)\n", n);
    abort();
  }
  return p;
}

float *th_alloc_f(size_t n) { return xmalloc(n * sizeof(float)); }
double *th_alloc_d(size_t n) { return xmalloc(n * sizeof(double)); }
int32_t *th_alloc_i(size_t n) { return xmalloc(n * sizeof(int32_t)); }

/* ---- running ops ------------------------------------------------------------------------------ */

void th_free_outputs(void **out, int nargs) {
  for (int i = 0; i < nargs; i++) {
    free(out[i]);
    out[i] = NULL;
  }
}

int th_run(tr_device *d, const th_arg *args, int nargs, th_run_fn run, void *ctx, void **out) {
  th_buf **bufs = calloc((size_t)nargs, sizeof *bufs);
  void **ptrs = calloc((size_t)nargs, sizeof *ptrs);
  int rc = -1;
  for (int i = 0; i < nargs; i++) out[i] = NULL;
  if (!bufs || !ptrs) goto done;
  tr_stream *s = tr_device_stream(d);
  for (int i = 0; i < nargs; i++) {
    const th_arg *a = &args[i];
    size_t bytes = a->n * a->elem;
    if (!(bufs[i] = th_buf_new(d, bytes))) goto done;
    ptrs[i] = th_buf_ptr(bufs[i]);
    if (a->init) {
      if (tr_memcpy(s, ptrs[i], a->init, bytes, TR_COPY_H2D)) goto device_error;
    } else if (tr_memset(s, ptrs[i], 0xFF, bytes)) { /* all ones: a NaN in every float */
      goto device_error;
    }
  }
  if ((rc = run(s, ptrs, ctx)) || (rc = tr_stream_synchronize(s))) goto device_error;
  rc = -1;
  for (int i = 0; i < nargs; i++) {
    const th_arg *a = &args[i];
    size_t bytes = a->n * a->elem;
    void *host = xmalloc(bytes);
    if (tr_memcpy(s, host, ptrs[i], bytes, TR_COPY_D2H) || tr_stream_synchronize(s)) {
      free(host);
      goto device_error;
    }
    if (a->dir == TH_OUT) {
      out[i] = host;
    } else {
      bool same = !a->init || !memcmp(host, a->init, bytes);
      free(host);
      if (!same) {
        fprintf(stderr, "%s: input '%s' was modified\n", tr_device_name(d), a->name);
        goto done;
      }
    }
    if (!th_buf_guards_intact(bufs[i], a->name)) goto done;
  }
  rc = 0;
  goto done;
device_error:
  fprintf(stderr, "%s\n", tr_device_error(d));
  if (!rc) rc = -1;
done:
  if (rc) th_free_outputs(out, nargs);
  for (int i = 0; bufs && i < nargs; i++) th_buf_free(bufs[i]);
  free(bufs);
  free(ptrs);
  return rc;
}

bool th_compare_devices(tr_device *ref_dev, tr_device *dev, const th_arg *args, int nargs,
                        th_run_fn run, void *ctx) {
  void **want = calloc((size_t)nargs, sizeof *want), **got = calloc((size_t)nargs, sizeof *got);
  bool ok = false;
  if (!want || !got) goto done;
  if (th_run(ref_dev, args, nargs, run, ctx, want) || th_run(dev, args, nargs, run, ctx, got))
    goto done;
  ok = true;
  for (int i = 0; i < nargs; i++) {
    if (args[i].dir != TH_OUT) continue;
    char what[160];
    snprintf(what, sizeof what, "%s vs %s: output '%s'", tr_device_name(dev),
             tr_device_name(ref_dev), args[i].name);
    double tol = args[i].tol > 0 ? args[i].tol : TH_TOL_ELEMENTWISE;
    ok &= th_check_f(what, got[i], want[i], args[i].n, tol);
  }
done:
  if (want) th_free_outputs(want, nargs);
  if (got) th_free_outputs(got, nargs);
  free(want);
  free(got);
  return ok;
}

/* ---- the two-thread peer copy ------------------------------------------------------------- */

typedef struct pair_ctx {
  tr_device *src, *dst;
  float *src_buf, *dst_buf; /* device memory of src and dst */
  tr_event *ready;          /* recorded by src after its work */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int posted; /* the "message": src's work is issued and `ready` recorded */
  int ok, rounds;
  size_t n;
} pair_ctx;

static int pair_work(tr_stream *s, float *buf, size_t n, int rounds) {
  int rc = tr_init_uniform(s, buf, n, -1, 1, 7, 0);
  for (int i = 0; i < rounds; i++) rc |= tr_scale(s, buf, i % 2 ? 0.5f : 2.0f, n);
  return rc;
}

static void *pair_producer(void *arg) {
  pair_ctx *c = arg;
  tr_device_bind(c->src);
  tr_stream *s = tr_device_stream(c->src);
  int rc = pair_work(s, c->src_buf, c->n, c->rounds);
  rc |= tr_event_open(c->src, TR_EVENT_DEFAULT, &c->ready);
  rc |= tr_event_record(c->ready, s);
  pthread_mutex_lock(&c->lock);
  c->posted = rc ? -1 : 1;
  pthread_cond_signal(&c->cond);
  pthread_mutex_unlock(&c->lock);
  return NULL;
}

static void *pair_consumer(void *arg) {
  pair_ctx *c = arg;
  tr_device_bind(c->dst);
  pthread_mutex_lock(&c->lock);
  while (!c->posted) pthread_cond_wait(&c->cond, &c->lock);
  pthread_mutex_unlock(&c->lock);
  if (c->posted < 0) return NULL;
  tr_stream *copy;
  float *got = th_alloc_f(c->n), *want = th_alloc_f(c->n), *tmp;
  int rc = tr_stream_open(c->dst, "peer copy", &copy);
  rc |= tr_stream_wait_event(copy, c->ready);
  rc |= tr_memcpy_peer(copy, c->dst_buf, c->dst, c->src_buf, c->src, c->n * 4);
  rc |= tr_memcpy(copy, got, c->dst_buf, c->n * 4, TR_COPY_D2H);
  rc |= tr_stream_synchronize(copy);
  tr_stream_close(copy);
  tr_stream *s = tr_device_stream(c->dst); /* the producer's work, redone here */
  rc |= tr_device_alloc(c->dst, c->n * 4, (void **)&tmp);
  rc |= pair_work(s, tmp, c->n, c->rounds);
  rc |= tr_memcpy(s, want, tmp, c->n * 4, TR_COPY_D2H);
  rc |= tr_stream_synchronize(s);
  rc |= tr_device_free(c->dst, tmp);
  if (rc) fprintf(stderr, "peer copy: %s\n", tr_device_error(c->dst));
  c->ok = !rc && !memcmp(got, want, c->n * 4);
  free(got), free(want);
  return NULL;
}

bool th_peer_copy_two_threads(tr_device *src, tr_device *dst, size_t n, int rounds) {
  pair_ctx c = {.src = src, .dst = dst, .n = n, .rounds = rounds};
  pthread_mutex_init(&c.lock, NULL);
  pthread_cond_init(&c.cond, NULL);
  tr_device_bind(src);
  tr_device_bind(dst);
  bool ok = false;
  if (tr_device_alloc(src, n * 4, (void **)&c.src_buf) ||
      tr_device_alloc(dst, n * 4, (void **)&c.dst_buf) ||
      /* the allocations must be complete before other threads' streams touch them */
      tr_stream_synchronize(tr_device_stream(src)) ||
      tr_stream_synchronize(tr_device_stream(dst)))
    goto out;
  pthread_t t1, t2;
  pthread_create(&t2, NULL, pair_consumer, &c);
  pthread_create(&t1, NULL, pair_producer, &c);
  pthread_join(t1, NULL);
  pthread_join(t2, NULL);
  ok = c.posted == 1 && c.ok;
out:
  tr_device_bind(src);
  tr_device_bind(dst);
  if (c.ready) tr_event_close(c.ready);
  if (c.src_buf) tr_device_free(src, c.src_buf);
  if (c.dst_buf) tr_device_free(dst, c.dst_buf);
  pthread_mutex_destroy(&c.lock);
  pthread_cond_destroy(&c.cond);
  return ok;
}
