/* refused.h — how the one-call API's tests check a refusal: tr_train_run returns `status`
 * with a message that leads with the option's field and says the rule, and tr_train_run_e
 * names the same field. Include after <cmocka.h>. */
#ifndef TR_TEST_REFUSED_H
#define TR_TEST_REFUSED_H

#include <string.h>

#include "troupe.h"

static inline void refused_with(const tr_train_options *o, int status, const char *field,
                                const char *rule) {
  char err[1024] = "";
  tr_train_result r;
  assert_int_equal(tr_train_run(o, &r, err, sizeof err), status);
  if (strncmp(err, field, strlen(field)) || !strstr(err, rule))
    fail_msg("the refusal does not lead with %s and say \"%s\": %s", field, rule, err);
  tr_error e;
  assert_int_equal(tr_train_run_e(o, &r, &e), status);
  if (strcmp(e.field, field)) fail_msg("tr_error's field is '%s', not %s", e.field, field);
}

/* The usual refusal: a bad option, TR_EINVAL. */
static inline void refused(const tr_train_options *o, const char *field, const char *rule) {
  refused_with(o, TR_EINVAL, field, rule);
}

#endif
