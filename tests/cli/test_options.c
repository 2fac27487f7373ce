/* test_options.c — `troupe train`'s options are one table (tools/cmd_train.c, read through
 * tools/cli.c): --help lists every row; a bad value of each kind (out of bounds, not one of an
 * enumeration's names, a flag the strategy does not take, a missing value, a flag without the
 * one it needs or with one it excludes) is refused with exit status 2 naming the flag; and a
 * configuration the library refuses (tr_job_check's tr_error) is shown naming the flags of
 * the fields it names. The command's own file is included to reach its table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cmd_train.c"

double cli_sgemm_gflops(int n) { /* reference.c's: not measured here */
  (void)n;
  return 0;
}

/* cli_parse of argv (NULL-terminated, after the command's name) into a fresh train_args: its
 * status, and what it wrote on stderr in out. */
static int parse(char *out, size_t n, train_args *a, ...) {
  char *argv[32] = {"train"};
  int argc = 1;
  va_list ap;
  va_start(ap, a);
  for (char *s; (s = va_arg(ap, char *)) != NULL && argc < 31;) argv[argc++] = s;
  va_end(ap);
  *a = (train_args){.o = tr_train_defaults()};
  char *text = NULL;
  size_t len = 0;
  FILE *saved = stderr, *f = open_memstream(&text, &len);
  assert_non_null(f);
  stderr = f;
  const int rc = cli_parse(&cli_train_table, argc, argv, a, NULL);
  stderr = saved;
  fclose(f);
  snprintf(out, n, "%s", text);
  free(text);
  return rc;
}

/* The rows a flag, row by row: "  --flag" begins a line of the help, and no other line
 * begins with an option. */
static void help_lists_every_row(void **state) {
  (void)state;
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  cli_help(f, &cli_train_table);
  fclose(f);
  int listed = 0;
  for (const char *line = text; line && *line; line = strchr(line, '\n')) {
    if (*line == '\n') line++;
    listed += !strncmp(line, "  --", 4);
  }
  assert_int_equal(listed, cli_train_table.count);
  for (int k = 0; k < cli_train_table.count; k++) {
    char want[64];
    snprintf(want, sizeof want, "\n  %s", rows[k].flag);
    const char *at = strstr(text, want);
    assert_non_null(at);
    const char after = at[strlen(want)];
    if (after != ' ' && after != '\n') fail_msg("%s: not listed as itself", rows[k].flag);
    if (rows[k].type == CLI_ENUM) /* the names of its values, from the library */
      assert_non_null(strstr(at, rows[k].name(0)));
  }
  free(text);
}

static void expect_refused(const char *err, const char *flag, const char *says) {
  char want[160];
  snprintf(want, sizeof want, "troupe: %s", flag);
  if (strncmp(err, want, strlen(want)) || !strstr(err, says))
    fail_msg("expected '%s ... %s', got '%s'", want, says, err);
}

/* Every row with a value: given none, and given one it cannot take. */
static void every_flag_refuses_a_bad_value_by_name(void **state) {
  (void)state;
  char err[512];
  train_args a;
  for (int k = 0; k < cli_train_table.count; k++) {
    const cli_option *o = &rows[k];
    if (o->type == CLI_SWITCH) continue;
    assert_int_equal(parse(err, sizeof err, &a, (char *)o->flag, NULL), CLI_USAGE);
    expect_refused(err, o->flag, " needs a value");
    if (o->type == CLI_STR) continue;
    assert_int_equal(parse(err, sizeof err, &a, (char *)o->flag, "x9,", NULL), CLI_USAGE);
    expect_refused(err, o->flag, ": 'x9,' is not ");
  }
}

static void bounds_names_and_strategies_are_the_rows(void **state) {
  (void)state;
  char err[512];
  train_args a;
  /* out of bounds */
  assert_int_equal(parse(err, sizeof err, &a, "--microbatches", "0", NULL), CLI_USAGE);
  expect_refused(err, "--microbatches", ": '0' is not a whole number from 1 to 65536");
  assert_int_equal(parse(err, sizeof err, &a, "--lr", "-1", NULL), CLI_USAGE);
  expect_refused(err, "--lr", ": '-1' is not a number from 1e-12 to 1e+06");
  /* not a name of the enumeration */
  assert_int_equal(parse(err, sizeof err, &a, "--schedule", "zigzag", NULL), CLI_USAGE);
  expect_refused(err, "--schedule", ": 'zigzag' is not gpipe, 1f1b, interleaved or zb1");
  assert_int_equal(parse(err, sizeof err, &a, "--strategy", "ring", NULL), CLI_USAGE);
  expect_refused(err, "--strategy", "is not single, dp, mp, pipeline, hybrid, async, local or tp");
  /* inapplicable to the strategy, wherever --strategy stands */
  assert_int_equal(parse(err, sizeof err, &a, "--hogwild", "--strategy", "dp", NULL), CLI_USAGE);
  expect_refused(err, "--hogwild", ": applies to --strategy async only (not dp)");
  assert_int_equal(parse(err, sizeof err, &a, "--strategy", "pipeline", "--stages", "2", NULL),
                   CLI_USAGE);
  expect_refused(err, "--stages", ": applies to --strategy hybrid or local only (not pipeline)");
  assert_int_equal(parse(err, sizeof err, &a, "--zero", "1", NULL), CLI_USAGE);
  expect_refused(err, "--zero", ": applies to --strategy dp or hybrid only (not single)");
  /* what one flag asks of another */
  assert_int_equal(parse(err, sizeof err, &a, "--checkpoint-every", "5", NULL), CLI_USAGE);
  expect_refused(err, "--checkpoint-every", " needs --checkpoint FILE");
  assert_int_equal(parse(err, sizeof err, &a, "--seconds", "1", "--steps", "5", NULL), CLI_USAGE);
  expect_refused(err, "--steps", " and --seconds: give one of them");
  assert_int_equal(parse(err, sizeof err, &a, "--colour", "red", NULL), CLI_USAGE);
  expect_refused(err, "train", ": unknown option '--colour'");
  /* and what is right lands in its field */
  assert_int_equal(parse(err, sizeof err, &a, "--strategy", "async", "--staleness", "3",
                         "--dc-lambda", "0.5", "--seed", "18446744073709551615", NULL),
                   CLI_GO);
  assert_int_equal(a.o.strategy, TR_STRATEGY_ASYNC);
  assert_int_equal(a.o.job.async.staleness, 3);
  assert_true(a.o.job.async.dc_lambda == 0.5f);
  assert_true(a.o.job.seed == UINT64_MAX);
  assert_int_equal(parse(err, sizeof err, &a, "--schedule", "zb1", "--cuts", "2,5",
                         "--profile-steps", "3:", "--strategy", "pipeline", NULL),
                   CLI_GO);
  assert_int_equal(a.o.job.layout.schedule, TR_SCHEDULE_ZB1);
  assert_int_equal(a.cuts.n, 2);
  assert_int_equal(a.cuts.v[1], 5);
  assert_int_equal(a.o.job.profile.from, 3);
  assert_int_equal(a.o.job.profile.to, 0);
}

/* tr_job_check says which field, and where its message names fields; the command writes
 * their flags there. */
static void library_errors_name_the_flags(void **state) {
  (void)state;
  char err[512];
  tr_model *m;
  tr_data *d;
  assert_int_equal(tr_model_named(&m, "mlp", err, sizeof err), 0);
  assert_int_equal(tr_data_open_for(&d, m, 1, NULL, NULL, err, sizeof err), 0);
  tr_job_config c = tr_job_defaults();
  c.model = m;
  c.data = d;
  c.layout.chunks = 3;
  tr_error e;
  assert_int_equal(tr_job_check(&c, &e), TR_EINVAL);
  assert_int_equal(e.status, TR_EINVAL);
  assert_string_equal(e.field, "layout.chunks");
  assert_int_equal(e.nspans, 2);
  assert_int_equal(e.spans[0].at, 0);
  assert_memory_equal(e.message + e.spans[1].at, "layout.schedule", e.spans[1].len);
  assert_non_null(strstr(e.message, "layout.chunks 3: only the interleaved schedule"));
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  cli_print_error(f, &cli_train_table, &e);
  fclose(f);
  assert_string_equal(text, "--chunks 3: only the interleaved schedule puts several chunks on "
                            "a device (--schedule is 1f1b)");
  free(text);

  c = tr_job_defaults();
  c.model = m;
  c.data = d;
  c.async.enabled = 1;
  c.async.hogwild = 1;
  c.async.staleness = 2;
  assert_int_equal(tr_job_check(&c, &e), TR_EINVAL);
  assert_string_equal(e.field, "async.hogwild");
  assert_int_equal(e.nspans, 5);
  f = open_memstream(&text, &len);
  cli_print_error(f, &cli_train_table, &e);
  fclose(f);
  assert_non_null(strstr(text, "so --staleness, --dc-lambda, --pull-every and --staleness-lr do "
                               "not apply"));
  free(text);

  c = tr_job_defaults(); /* a good one is completed: the model's batch */
  c.model = m;
  c.data = d;
  assert_int_equal(tr_job_check(&c, &e), 0);
  assert_int_equal(e.status, 0);
  assert_string_equal(e.field, "");
  assert_int_equal(c.global_batch, tr_model_batch(m));
  tr_data_close(d);
  tr_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(help_lists_every_row),
      cmocka_unit_test(every_flag_refuses_a_bad_value_by_name),
      cmocka_unit_test(bounds_names_and_strategies_are_the_rows),
      cmocka_unit_test(library_errors_name_the_flags),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
