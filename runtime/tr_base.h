/* tr_base.h — what every troupe module shares: status codes, the assertion macro, clocks.
 *
 * Functions that can fail return an int: 0 on success or a negative TR_E... code. The text
 * of a failure lives with the object that failed (tr_system_error(), ...); tr_strerror()
 * names the code itself.
 *
 * Misuse (SQLite's SQLITE_MISUSE is the model): a public function given what it cannot act on
 * (a NULL object or buffer, a count out of range, a call out of its order) returns TR_EINVAL
 * or TR_ESTATE with a message naming the function and the argument ("tr_graph_add: config
 * is NULL"): in the caller's `err` buffer, or in the owning object's error text
 * (tr_graph_error, tr_job_error, tr_stage_error, tr_device_error, ...), or, where the call
 * has neither, on stderr ("troupe: tr_graph_new: out is NULL"). A call that returns no status
 * does what its header says of such an argument and says so on stderr: freeing or closing
 * NULL does nothing (the libc way), a getter of NULL answers 0, NULL or "", a send to NULL
 * frees the message. Nothing a caller passes aborts the process.
 *
 * TR_ASSERT(cond) checks an invariant of the program, not of its input. It stays on in
 * release builds and aborts with file:line, because continuing past a broken invariant in a
 * concurrent runtime turns one bug into a hang or silent corruption somewhere else.
 * TR_DEBUG_ASSERT is the same check compiled only into debug builds, for hot paths.
 */
#ifndef TR_BASE_H
#define TR_BASE_H

#include <stddef.h>
#include <stdint.h>

#include "tr_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TR_VERSION_MAJOR 0
#define TR_VERSION_MINOR 1
#define TR_VERSION_PATCH 0
#define TR_VERSION_STRING "0.1.0"

/* X(name, value, description): the one list of status codes. */
#define TR_STATUS_MAP(X)                                                   \
  X(TR_EINVAL, -1, "invalid argument")                                     \
  X(TR_ENOMEM, -2, "out of memory")                                        \
  X(TR_ESTATE, -3, "operation not valid in this state")                    \
  X(TR_ESYS, -4, "system call failed")                                     \
  X(TR_EINTR, -6, "interrupted by a signal")                               \
  X(TR_ENODEV, -8, "no such device")                                       \
  X(TR_EDEVICE, -9, "device operation failed")                             \
  X(TR_EIO, -10, "input/output error")                                     \
  X(TR_EFORMAT, -11, "malformed data")                                     \
  X(TR_ETIMEDOUT, -12, "timed out")                                       \
  X(TR_ENONFINITE, -13, "not a finite number")

enum tr_status {
  TR_OK = 0,
#define TR__STATUS_ENUM(name, value, text) name = value,
  TR_STATUS_MAP(TR__STATUS_ENUM)
#undef TR__STATUS_ENUM
};

/* The name and description of a status code ("TR_EINVAL: invalid argument"). */
TR_API const char *tr_strerror(int status);

/* For functions that report into a caller's buffer (`char *err, size_t err_size`): writes
 * the message there (nothing when err is NULL or err_size 0) and returns `status`, so a
 * check reads `return tr_errorf(err, n, TR_EINVAL, "layout.stages %d: ...", p);`. */
TR_API int tr_errorf(char *err, size_t err_size, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#ifdef __cplusplus
#define TR_NORETURN [[noreturn]]
#else
#define TR_NORETURN _Noreturn
#endif

/* Internal (not exported: the library's own parts and its tools use them). A caller's misuse
 * that has nowhere else to go (above): "troupe: <text>" on stderr, the process's log, and
 * `status` back:
 *   if (out == NULL) return tr__misuse(TR_EINVAL, "tr_graph_new: out is NULL");
 * TR__NOT_NULL(p) is that for an argument `p` of the public function it begins. */
int tr__misuse(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define TR__NOT_NULL(p) \
  if (__builtin_expect((p) == NULL, 0)) return tr__misuse(TR_EINVAL, "%s: %s is NULL", __func__, #p)
/* The name tables
 * behind every tr_*_name and tr_*_parse: names[i] for 0 <= i < n, else "?"; the index of
 * `name` among names[0, n), or -1 for NULL or an unknown name. */
const char *tr__name_of(const char *const *names, int n, int i);
/* The latest run's first failure, process-wide ("" when it has not failed: a system's run
 * clears it as it starts, tr__system_fail sets it), and its printing, once, on the way to an
 * abort (tr_assert_fail, the device layer's owner check): the cause before the symptom. */
void tr__run_error_set(const char *text);
void tr__run_error_print(void); /* to stderr */
int tr__name_index(const char *const *names, int n, const char *name);
#define TR__COUNTOF(a) ((int)(sizeof(a) / sizeof *(a)))
/* Returns the status of a failing call from the enclosing function. */
#define TR__TRY(call)            \
  do {                           \
    int tr__rc_ = (call);        \
    if (tr__rc_) return tr__rc_; \
  } while (0)

/* Prints "troupe: assertion failed: <expr> at file:line" and aborts (TR_ASSERT's, public
 * because the macro is). */
TR_NORETURN TR_API void tr_assert_fail(const char *expr, const char *file, int line);

#define TR_ASSERT(cond) \
  (__builtin_expect(!!(cond), 1) ? (void)0 : tr_assert_fail(#cond, __FILE__, __LINE__))

#ifdef NDEBUG
#define TR_DEBUG_ASSERT(cond) ((void)0)
#else
#define TR_DEBUG_ASSERT(cond) TR_ASSERT(cond)
#endif

/* Monotonic time in nanoseconds (CLOCK_MONOTONIC). */
TR_API uint64_t tr_now_ns(void);
/* The calling thread's CPU time in nanoseconds (CLOCK_THREAD_CPUTIME_ID): work timed by it is
 * not charged for the time other threads had its CPU. */
uint64_t tr__thread_cpu_ns(void);
/* v[0..n) in ascending order (timings, for their median: v[n / 2] where n is odd). */
void tr__sort_doubles(double *v, size_t n);

/* A spin-wait hint for the CPU: lets the sibling hyperthread run and saves power. */
static inline void tr_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* A consumer's spin-wait on a queue that another thread fills. Each look reads the line the
 * producer writes next and takes it from the producer, so a consumer that keeps up with a
 * stream slows it down more than it gains: it should look seldom then, and let messages
 * pile up. A message that comes alone (a round trip) wants the opposite. The wait learns
 * which it is: an idle period starts with `gap` pauses before its first look; when that look
 * finds a message, messages stream and the next gap is twice as long (up to
 * TR_SPIN_GAP_MAX); when it finds none, gap drops to one pause and the next looks come
 * after 1, 2, 4, then every 8 pauses. The state is the consumer's, kept across periods:
 *
 *   tr_spin spin = TR_SPIN_INIT;
 *   ...
 *   if ((m = pop(q)) == NULL) {               // empty: an idle period
 *     tr_spin_begin(&spin);
 *     do tr_spin_wait(&spin); while ((m = pop(q)) == NULL);
 *     tr_spin_found(&spin);
 *   }
 */
typedef struct tr_spin {
  unsigned gap;    /* pauses before an idle period's first look */
  unsigned pauses; /* before the next look */
  unsigned looks;  /* in this idle period */
} tr_spin;

enum { TR_SPIN_GAP_MAX = 1024, TR_SPIN_STEP_MAX = 8 }; /* pauses, ~25 ns each here */
#define TR_SPIN_INIT ((tr_spin){.gap = 1})

static inline void tr_spin_begin(tr_spin *s) {
  s->pauses = s->gap;
  s->looks = 0;
}

static inline void tr_spin_wait(tr_spin *s) {
  if (s->looks++ == 1) s->gap = 1; /* the first look found nothing: no stream */
  for (unsigned k = 0; k < s->pauses; k++) tr_cpu_relax();
  s->pauses = s->looks == 1 ? 1 : s->pauses < TR_SPIN_STEP_MAX ? 2 * s->pauses : s->pauses;
}

/* The look after the last tr_spin_wait found a message. */
static inline void tr_spin_found(tr_spin *s) {
  if (s->looks == 1 && s->gap < TR_SPIN_GAP_MAX) s->gap *= 2;
}

#define TR_CACHE_LINE 64

#ifdef __cplusplus
}
#endif
#endif
