/* test_misuse.c — the public API refuses its callers' mistakes and never crashes on them: a
 * NULL where an object or buffer belongs, a count or size out of range, a call out of its
 * order (a graph run twice, an actor added after the run) return TR_EINVAL or TR_ESTATE with
 * a message naming the function and the argument, and a call that returns no status does
 * what its header says of such an argument (freeing NULL does nothing). SQLite's
 * SQLITE_MISUSE is the model.
 *
 * Every case (misuse_*.c, misuse.h says how one is written) runs in a child process of its
 * own, so that a crash is counted and named (the call and the signal) instead of ending the
 * test, and a hang is ended by an alarm. The test fails when any call crashes or hangs,
 * returns another status than the one it must (0: wrongly accepted), or says nothing that
 * names what was wrong. Prints one line per failing case and the counts:
 *
 *   test_misuse            every case
 *   test_misuse graph_     the cases whose id contains "graph_"
 *   test_misuse -v         every case's line, passing or not
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "misuse.h"

/* A child's exit status: 0, STATUS + -rc for a status rc < 0, WRONG (a call with no status
 * did not do what its header says) or FIXTURE_FAILED. Any other (a sanitizer's report, exit
 * 1 by default) is a crash too. */
enum { MAX_CASES = 1024, ALARM_S = 30, STATUS = 64, WRONG = 40, FIXTURE_FAILED = 41 };

typedef struct {
  const char *id, *call, *say[2], *file;
  misuse_fn fn;
  int want, line;
} misuse_case;

static misuse_case cases[MAX_CASES];
static int ncases;

void misuse_register(const char *id, const char *call, misuse_fn fn, int want, const char *say1,
                     const char *say2, const char *file, int line) {
  if (ncases == MAX_CASES) {
    fprintf(stderr, "test_misuse: more than %d cases: raise MAX_CASES\n", MAX_CASES);
    exit(1);
  }
  cases[ncases++] = (misuse_case){.id = id, .call = call, .fn = fn, .want = want,
                                  .say = {say1, say2}, .file = file, .line = line};
}

/* Cases in the order they are written: by file, then line (constructors run in no order). */
static int by_place(const void *a, const void *b) {
  const misuse_case *x = a, *y = b;
  int c = strcmp(x->file, y->file);
  return c ? c : x->line - y->line;
}

int misuse_rc;

int misuse_said(char *msg, size_t n, int rc, const char *text) {
  if (text && n) snprintf(msg, n, "%s", text);
  return rc;
}

/* ---- fixtures ---------------------------------------------------------------------------- */

static char dir[256]; /* the case's own directory (scratch_path) */

static _Noreturn void fixture_failed(const char *what, int rc, const char *err) {
  fprintf(stderr, "fixture %s: %s: %s\n", what, tr_strerror(rc), err ? err : "");
  fflush(stderr);
  _exit(FIXTURE_FAILED);
}
#define FIXTURE(what, call, err)                      \
  do {                                                \
    int rc_ = (call);                                 \
    if (rc_) fixture_failed(what, rc_, (err));        \
  } while (0)

const char *scratch_path(const char *name) {
  static char paths[8][512];
  static int next;
  char *p = paths[next++ % 8];
  snprintf(p, sizeof paths[0], "%s/%s", dir, name);
  return p;
}

tr_system *system_new(void) {
  tr_system *s;
  FIXTURE("tr_system_new", tr_system_new(&s, &(tr_system_config){.name = "misuse"}), NULL);
  return s;
}

tr_graph *graph_new(void) {
  tr_graph *g;
  FIXTURE("tr_graph_new", tr_graph_new(&g, NULL), NULL);
  return g;
}

static int nothing_receive(tr_actor *self, tr_msg *msg) {
  (void)self, (void)msg;
  return 0;
}
static const tr_behaviour nothing = {.name = "nothing", .receive = nothing_receive};

tr_actor *actor_of(tr_graph *g, const char *name) {
  tr_actor *a;
  FIXTURE("tr_graph_add", tr_graph_add(g, &(tr_actor_config){.name = name, .kind = TR_ACTOR_LOOP,
                                                               .behaviour = &nothing}, &a),
          tr_graph_error(g));
  return a;
}

/* The one actor of graph_one and graph_during: its state says what to do at its start. */
typedef struct {
  tr_graph *g;
  int (*fn)(tr_graph *g, tr_actor *self, char *msg, size_t n);
  char *msg;
  size_t n;
  int rc;
} during;

static int during_start(tr_actor *self) {
  during *d = tr_actor_state(self);
  if (d->fn) d->rc = d->fn(d->g, self, d->msg, d->n);
  tr_graph_done(d->g, self);
  return 0;
}
static const tr_behaviour during_behaviour = {.name = "during", .start = during_start,
                                              .receive = nothing_receive};

static tr_graph *graph_with(during *d, tr_actor **actor) {
  d->g = graph_new();
  tr_actor *a;
  FIXTURE("tr_graph_add", tr_graph_add(d->g, &(tr_actor_config){.name = "one",
                                                                  .kind = TR_ACTOR_LOOP,
                                                                  .behaviour = &during_behaviour,
                                                                  .state = d}, &a),
          tr_graph_error(d->g));
  if (actor) *actor = a;
  return d->g;
}

tr_graph *graph_one(tr_actor **actor) {
  static during d;
  return graph_with(&d, actor);
}

tr_graph *graph_ran(tr_actor **actor) {
  tr_graph *g = graph_one(actor);
  FIXTURE("tr_graph_run", tr_graph_run(g, 0, 1, 0), tr_graph_error(g));
  return g;
}

int graph_during(int (*fn)(tr_graph *g, tr_actor *self, char *msg, size_t n), char *msg,
                 size_t n) {
  static during d;
  d = (during){.fn = fn, .msg = msg, .n = n};
  tr_graph *g = graph_with(&d, NULL);
  const int rc = tr_graph_run(g, 0, 1, 0);
  return d.rc ? d.rc : said(msg, n, rc, rc ? tr_graph_error(g) : NULL);
}

tr_model *model(void) {
  static tr_model *m;
  if (!m) FIXTURE("tr_model_simplenet", tr_model_simplenet(&m), NULL);
  return m;
}

tr_device_list *devices(void) {
  static tr_device_list *l;
  static char err[256];
  if (!l) FIXTURE("tr_device_list_open", tr_device_list_open(&l, "host:2", err, sizeof err), err);
  return l;
}

tr_device *device(void) { return tr_device_list_at(devices(), 0); }
tr_stream *stream(void) { return tr_device_stream(device()); }

float *device_floats(size_t count) {
  void *p;
  FIXTURE("tr_device_alloc", tr_device_alloc(device(), count * sizeof(float), &p),
          tr_device_error(device()));
  return p;
}

tr_stage *stage(void) {
  static tr_stage *st;
  static char err[256];
  if (st) return st;
  tr_stage_config c = tr_stage_defaults(model());
  FIXTURE("tr_stage_open", tr_stage_open(&st, model(), device(), &c, err, sizeof err), err);
  return st;
}

tr_data *data(void) {
  static tr_data *d;
  static char err[256];
  if (!d) FIXTURE("tr_data_open_for", tr_data_open_for(&d, model(), 1, NULL, NULL, err, sizeof err), err);
  return d;
}

tr_job *job(tr_graph *g) {
  tr_job *j;
  static char err[256];
  tr_job_config c = tr_job_defaults();
  c.model = model();
  c.data = data();
  FIXTURE("tr_job_new", tr_job_new(&j, g, &c, err, sizeof err), err);
  return j;
}

tr_checkpoint_writer *writer(void) {
  tr_checkpoint_writer *w = tr_checkpoint_writer_new();
  static const float v[4] = {1, 2, 3, 4};
  if (!w) fixture_failed("tr_checkpoint_writer_new", TR_ENOMEM, NULL);
  FIXTURE("tr_checkpoint_writer_add",
          tr_checkpoint_writer_add(w, "w", TR_DTYPE_F32, 1, (int64_t[]){4}, v),
          tr_checkpoint_writer_error(w));
  FIXTURE("tr_checkpoint_writer_put_u64", tr_checkpoint_writer_put_u64(w, "step", 3),
          tr_checkpoint_writer_error(w));
  return w;
}

tr_checkpoint *checkpoint(void) {
  tr_checkpoint_writer *w = writer();
  const char *path = scratch_path("ck.safetensors");
  FIXTURE("tr_checkpoint_writer_save", tr_checkpoint_writer_save(w, path),
          tr_checkpoint_writer_error(w));
  tr_checkpoint *ck;
  static char err[256];
  FIXTURE("tr_checkpoint_open", tr_checkpoint_open(&ck, path, err, sizeof err), err);
  return ck;
}

tr_schedule *schedule(void) {
  tr_schedule *sc;
  FIXTURE("tr_schedule_new",
          tr_schedule_new(&sc, &(tr_schedule_config){.kind = TR_SCHEDULE_1F1B, .stages = 2,
                                                      .microbatches = 4}),
          NULL);
  return sc;
}

tr_train_options train_options(void) {
  tr_train_options o = tr_train_defaults();
  o.model = "simplenet";
  o.devices = "host:1";
  o.steps = 2;
  return o;
}

/* ---- the harness --------------------------------------------------------------------------- */

typedef enum { PASSED, CRASHED, HUNG, ACCEPTED, WRONG_STATUS, UNSAID, UNDEFINED, FIXTURE } outcome;

static const char *const outcome_names[] = {
    "ok", "CRASHED", "HUNG", "WRONGLY ACCEPTED", "WRONG STATUS", "SAID NOTHING OF IT",
    "NOT AS DOCUMENTED", "FIXTURE FAILED"};

/* Runs case c in a child whose stderr, and then the message the case copied, go to `out`. */
static outcome run_case(const misuse_case *c, int out, int *status, int *sig, char *text,
                        size_t text_size) {
  fflush(NULL);
  const pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    exit(1);
  }
  if (pid == 0) {
    dup2(out, 2);
    alarm(ALARM_S);
    char msg[2048] = "";
    const int rc = c->fn(msg, sizeof msg);
    fprintf(stderr, "\n%s\n", msg);
    fflush(stderr);
    _exit(rc < 0 ? STATUS + ((-rc) & 0x3f) : rc > 0 ? WRONG : 0);
  }
  int ws;
  while (waitpid(pid, &ws, 0) < 0)
    if (errno != EINTR) {
      perror("waitpid");
      exit(1);
    }
  const ssize_t got = pread(out, text, text_size - 1, 0);
  text[got > 0 ? got : 0] = 0;
  *sig = 0;
  if (WIFSIGNALED(ws)) {
    *sig = WTERMSIG(ws);
    return *sig == SIGALRM ? HUNG : CRASHED;
  }
  const int code = WEXITSTATUS(ws);
  if (code == FIXTURE_FAILED) return FIXTURE;
  if (code != 0 && code != WRONG && code < STATUS) {
    *sig = -code; /* exited in the middle of the call: a sanitizer's report, exit() */
    return CRASHED;
  }
  *status = code == WRONG ? 1 : code ? -(code - STATUS) : 0;
  if (c->want == MISUSE_DEFINED) {
    if (*status) return UNDEFINED;
  } else if (*status == 0) {
    return ACCEPTED;
  } else if (c->want != MISUSE_REFUSED && *status != c->want) {
    return WRONG_STATUS;
  }
  for (int k = 0; k < 2; k++)
    if (c->say[k] && !strstr(text, c->say[k])) return UNSAID;
  return PASSED;
}

/* The last line that says something: the message, or what went to stderr before it. */
static const char *last_words(char *text) {
  char *end = text + strlen(text);
  while (end > text && (end[-1] == '\n' || end[-1] == ' ')) *--end = 0;
  char *line = end;
  while (line > text && line[-1] != '\n') line--;
  return line;
}

int main(int argc, char **argv) {
  bool verbose = false;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-v")) verbose = true;
    else only = argv[i];
  }
  qsort(cases, (size_t)ncases, sizeof *cases, by_place);
  snprintf(dir, sizeof dir, "%s/test_misuse.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  int counts[FIXTURE + 1] = {0}, made = 0, refused = 0, defined = 0;
  static char text[1 << 16];
  for (int i = 0; i < ncases; i++) {
    const misuse_case *c = &cases[i];
    if (only && !strstr(c->id, only)) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/out", dir);
    const int out = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (out < 0) {
      perror(path);
      return 1;
    }
    int status = 0, sig = 0;
    const outcome o = run_case(c, out, &status, &sig, text, sizeof text);
    close(out);
    made++;
    counts[o]++;
    if (o != CRASHED && o != HUNG && o != FIXTURE) {
      if (c->want == MISUSE_DEFINED) defined++;
      else if (status < 0) refused++;
    }
    if (o == PASSED && !verbose) continue;
    printf("%-16s %-34s %s", outcome_names[o], c->id, c->call);
    if (o == CRASHED && sig < 0) printf(": exit status %d", -sig);
    else if (o == CRASHED || o == HUNG) printf(": %s", strsignal(sig));
    else if (o != FIXTURE && c->want != MISUSE_DEFINED) printf(": %s", tr_strerror(status));
    if (o == UNSAID) printf(" (wants \"%s\"%s%s%s)", c->say[0], c->say[1] ? ", \"" : "",
                            c->say[1] ? c->say[1] : "", c->say[1] ? "\"" : "");
    if (o == PASSED) { /* -v: its last words */
      const char *words = last_words(text);
      printf(*words ? " — \"%.300s\"\n" : "\n", words);
      continue;
    }
    printf("\n");
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
      printf("    %s\n", line); /* all it said: the message, or a sanitizer's report */
  }
  printf("\n%d calls: %d crashed, %d hung, %d returned an error (%d of them another status than "
         "the one they must), %d wrongly accepted, %d with no status did as documented (%d "
         "did not), %d said nothing naming the problem, %d fixtures failed\n",
         made, counts[CRASHED], counts[HUNG], refused, counts[WRONG_STATUS], counts[ACCEPTED],
         defined - counts[UNDEFINED], counts[UNDEFINED], counts[UNSAID], counts[FIXTURE]);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) fprintf(stderr, "test_misuse: could not remove %s\n", dir);
  return made && counts[PASSED] == made ? 0 : 1;
}
